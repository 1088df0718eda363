"""Benchmarks, run on the GPU: ``python -m benchmarks.run SUITE [SUITE ...]``."""
