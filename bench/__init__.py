"""Benchmarks: scripts that compare in one run and report ratios (never timed tests)."""
