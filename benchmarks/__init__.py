"""Benchmarks (a package so that `python -m benchmarks.experimental.b12x.<module>` runs from the root)."""
