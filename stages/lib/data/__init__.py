"""The data wing: shards, groups, changes, remotes, the Ray cluster, rows, subsets, out folders."""
