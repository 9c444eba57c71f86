"""Benchmarks of the b12x kernel families: one `bench_<family>.py` each, on the harness in `common.py`."""
