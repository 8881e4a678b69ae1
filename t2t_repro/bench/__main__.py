"""Runs a benchmark: `python -m t2t_repro.bench <benchmark> [--help]`.

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


def usage_error(message):
    """Exits with argparse's status for a usage error, the message in one line."""
    sys.stderr.write(f"error: python -m t2t_repro.bench: {message}\n")
    sys.exit(2)


def split_backend_flag(flags):
    """(the backend `--backend=NAME` or `--backend NAME` asks for, tensorflow when absent; the
    other flags, for the benchmark's own parser)."""
    rest, chosen = list(flags), "tensorflow"
    for index, flag in enumerate(flags):
        if flag == "--backend":
            if index + 1 == len(flags):
                usage_error("--backend needs a value: tensorflow or jax")
            chosen = flags[index + 1]
            rest = flags[:index] + flags[index + 2:]
            break
        if flag.startswith("--backend="):
            chosen = flag.split("=", 1)[1]
            rest = flags[:index] + flags[index + 1:]
            break
    if chosen not in ("tensorflow", "jax"):
        usage_error(f"--backend must be tensorflow or jax, got '{chosen}'")
    return chosen, rest


def main(argv):
    if argv[1:2] in (["--help"], ["-h"]):
        print(f"{__doc__.splitlines()[0]}\nbenchmarks: {', '.join(sorted(BENCHMARKS))}")
        return
    if len(argv) < 2 or argv[1] not in BENCHMARKS:
        usage_error(f"name a benchmark first: {', '.join(sorted(BENCHMARKS))} (each takes "
                    f"--help)")
    name = argv[1]
    chosen, flags = split_backend_flag(argv[2:])
    modules = BENCHMARKS
    if chosen == "jax":
        if name not in JAX_BENCHMARKS:
            usage_error(f"bench {name} has no --backend=jax; it runs on TensorFlow (leave "
                        f"--backend out)")
        os.environ["KERAS_BACKEND"] = "jax"  # before Keras is imported
        modules = JAX_BENCHMARKS
    if backend.is_tensorflow():
        quiet_tensorflow.import_tensorflow()  # before anything imports it: see the module
    import importlib

    report_user_errors(importlib.import_module(modules[name]).main)(flags)


if __name__ == "__main__":
    main(sys.argv)
