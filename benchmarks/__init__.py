"""Benchmarks: each prints its figures and ratios against a baseline measured in the same run."""
