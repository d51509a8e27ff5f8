"""The few helpers the stages share. Nothing here imports torch at module level."""
