"""The shared code under the tasks and the stages, in wings that a dvc.yaml dep can name:

- train/: the training loop and everything that shapes a run (checkpoints, EMA, DDP, kernels,
  determinism, device batches, augmentation, fine-tuning, the training log, core counts);
- model/: building models, export formats, ONNX cleaning, parity, provenance;
- data/: shards, near-duplicate groups, data changes, remotes, the Ray cluster, rows, subsets,
  out folders, prepare's fitted settings;
- modality/: what a file is (image, audio): decode, checks, augment, serve guard;
- the root: the few helpers every floor uses (io, safefs, userfiles, params, show, checks,
  hooks, charts, csvlimit), door (what a stage may read of the params) and codedeps (a stage's
  code, read from its imports).

Nothing here imports stages.tasks, a stage module or tools; nothing imports torch at module
level.
"""
