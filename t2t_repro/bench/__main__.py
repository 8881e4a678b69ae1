"""Runs a benchmark: `python -m t2t_repro.bench decode|pipeline|serve|train [--help]`.

`train --backend=jax` runs `bench.train_jax` under JAX without importing TensorFlow."""

import os
import sys

from t2t_repro.utils import backend
from t2t_repro.cli import quiet_tensorflow
from t2t_repro.cli.entry_point import report_user_errors

BENCHMARKS = {"decode": "t2t_repro.bench.decode", "packing": "t2t_repro.bench.packing",
              "pipeline": "t2t_repro.bench.pipeline", "search": "t2t_repro.bench.search",
              "serve": "t2t_repro.bench.serve",
              "train": "t2t_repro.bench.train"}
JAX_BENCHMARKS = {"train": "t2t_repro.bench.train_jax"}


def main(argv):
    if len(argv) < 2 or argv[1] not in BENCHMARKS:
        names = ", ".join(sorted(BENCHMARKS))
        sys.exit(f"usage: python -m t2t_repro.bench <benchmark> [flags]; benchmarks: {names}")
    name, flags = argv[1], argv[2:]
    modules = BENCHMARKS
    if "--backend=jax" in flags:
        if name not in JAX_BENCHMARKS:
            sys.exit(f"bench {name} has no --backend=jax; it runs on TensorFlow.")
        os.environ["KERAS_BACKEND"] = "jax"  # before Keras is imported
        flags, modules = [flag for flag in flags if flag != "--backend=jax"], JAX_BENCHMARKS
    if backend.is_tensorflow():
        quiet_tensorflow.import_tensorflow()  # before anything imports it: see the module
    import importlib

    report_user_errors(importlib.import_module(modules[name]).main)(flags)


if __name__ == "__main__":
    main(sys.argv)
