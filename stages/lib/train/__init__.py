"""The training wing: the loop and everything that shapes a run's weights."""
