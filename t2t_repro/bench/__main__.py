"""Runs a benchmark: `python -m t2t_repro.bench <benchmark> [--help]`.

`train --backend=jax` runs `bench.train_jax` under JAX without importing TensorFlow."""

import os
import sys

from t2t_repro.bench.arguments import JAX_HELP
from t2t_repro.utils import backend
from t2t_repro.cli import quiet_tensorflow
from t2t_repro.cli.entry_point import report_user_errors
from t2t_repro.cli.one_line_parser import OneLineErrorParser

BENCHMARKS = {"decode": "t2t_repro.bench.decode", "packing": "t2t_repro.bench.packing",
              "pipeline": "t2t_repro.bench.pipeline", "search": "t2t_repro.bench.search",
              "serve": "t2t_repro.bench.serve",
              "train": "t2t_repro.bench.train"}
JAX_BENCHMARKS = {"train": "t2t_repro.bench.train_jax"}


def dispatcher_parser():
    """The parser of what comes before a benchmark's own flags: its usage errors are one line,
    as the benchmarks' are, and it reads only --backend."""
    parser = OneLineErrorParser(prog="python -m t2t_repro.bench", add_help=False,
                                allow_abbrev=False)
    parser.add_argument("--backend", choices=("tensorflow", "jax"), default="tensorflow")
    return parser


def split_backend_flag(flags):
    """(the backend `--backend=NAME` or `--backend NAME` asks for, tensorflow when absent; the
    other flags, in order, for the benchmark's own parser)."""
    known, rest = dispatcher_parser().parse_known_args(flags)
    return known.backend, rest


def main(argv):
    if argv[1:2] in (["--help"], ["-h"]):
        print(f"{__doc__.splitlines()[0]}\n{JAX_HELP}\n"
              f"benchmarks: {', '.join(sorted(BENCHMARKS))}")
        return
    if len(argv) < 2 or argv[1] not in BENCHMARKS:
        dispatcher_parser().error(f"name a benchmark first: {', '.join(sorted(BENCHMARKS))}")
    name = argv[1]
    chosen, flags = split_backend_flag(argv[2:])
    modules = BENCHMARKS
    if chosen == "jax":
        if name not in JAX_BENCHMARKS:
            dispatcher_parser().error(f"bench {name} has no --backend=jax; it runs on "
                                      f"TensorFlow (leave --backend out)")
        os.environ["KERAS_BACKEND"] = "jax"  # before Keras is imported
        modules = JAX_BENCHMARKS
    if backend.is_tensorflow():
        quiet_tensorflow.import_tensorflow()  # before anything imports it: see the module
    import importlib

    report_user_errors(importlib.import_module(modules[name]).main)(flags)


if __name__ == "__main__":
    main(sys.argv)
