"""Benchmarks: `python -m t2t_repro.bench <name>`; each prints a table beside a peer measured
in the same run."""
