"""Benchmarks (not timed tests). `python -m bench` runs every benchmark module in this folder."""
