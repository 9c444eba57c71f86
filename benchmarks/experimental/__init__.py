"""Benchmarks of flashinfer.experimental."""
