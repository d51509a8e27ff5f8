"""Benchmark scripts, each printing a ratio against a baseline measured beside it.

Run one from the repository root as a module: `python -m bench.scale`, `python -m bench.train`
(docs/benchmarks.md lists them and their figures).
"""
