"""Runs a benchmark: `python -m t2t_repro.bench decode|pipeline|serve|train [--help]`."""

import sys

from t2t_repro import quiet_tensorflow

quiet_tensorflow.import_tensorflow()  # before anything imports it: see the module

BENCHMARKS = {"decode": "t2t_repro.bench.decode", "pipeline": "t2t_repro.bench.pipeline",
              "serve": "t2t_repro.bench.serve", "train": "t2t_repro.bench.train"}


def main(argv):
    if len(argv) < 2 or argv[1] not in BENCHMARKS:
        names = ", ".join(sorted(BENCHMARKS))
        sys.exit(f"usage: python -m t2t_repro.bench <benchmark> [flags]; benchmarks: {names}")
    import importlib

    importlib.import_module(BENCHMARKS[argv[1]]).main(argv[2:])


if __name__ == "__main__":
    main(sys.argv)
