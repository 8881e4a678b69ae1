"""Packed rows against length-bucketed batches: padding and training speed (hparam `packed`).

    python -m t2t_repro.bench packing [--data_root ../shared/data] [--batch_tokens 4096]
        [--backends tensorflow,jax] [--steps 4] [--warmup 1] [--hparams OVERRIDES]

In one run, on this machine: newstest2014's 3,003 pairs encoded with the 37,000-piece shared
vocabulary (as `bench train`), batched at `--batch_tokens` padded tokens with
`hparams.max_length` 256 in three ways: bucketed as the TensorFlow pipeline batches
(`ArrayBatches`, each batch padded to its longest pair), bucketed to the JAX trainer's bucket
shapes (`fixed_shapes`), and packed (`PackedBatches`, rows of 256). Reported for each: the
fraction of source and target positions that are padding over the whole epoch and over the
timed batches, and for every backend the real target tokens per second of transformer_base
training steps on the epoch's first `--steps` full batches (`timed_batches`), after one untimed
step on a batch of each shape among them and `--warmup` more, each backend and batching in a
process of its own with its peak memory.
"""

import os
import tempfile
import time

import numpy as np

from t2t_repro.bench.arguments import (comma_list, int_at_least, non_negative_int, one_of,
                                       positive_int)
from t2t_repro.bench.newstest import encode_with_shared_vocabulary, newstest2014
from t2t_repro.bench.peak_memory import run_in_own_process
from t2t_repro.bench.pipeline import DEFAULT_DATA_ROOT
from t2t_repro.cli.one_line_parser import OneLineErrorParser

MAX_LENGTH = 256
BATCHINGS = ("bucketed", "bucketed to fixed shapes", "packed")
BACKEND_BATCHING = {"tensorflow": "bucketed", "jax": "bucketed to fixed shapes"}


def epoch_batches(pairs, batching, batch_tokens, seed=1):
    """One shuffled epoch of `pairs` (id lists) as training batches: `(features, targets)`."""
    from t2t_repro.data.array_batches import ArrayBatches
    from t2t_repro.data.packed_batches import PackedBatches
    from t2t_repro.data.token_arrays import TokenArrays

    arrays = TokenArrays.from_pairs(pairs)
    if batching == "packed":
        return list(PackedBatches(arrays, batch_tokens, MAX_LENGTH, repeat=False, seed=seed))
    return list(ArrayBatches(arrays, batch_tokens, MAX_LENGTH, shuffle=True, seed=seed,
                             fixed_shapes=batching != "bucketed"))


def timed_batches(batches, steps):
    """The first `steps` of `batches` in which every row holds a pair. The others are an
    epoch's partial batches: the packed epoch's remainder, and batches with fewer pairs than
    their bucket's fixed shape has rows, filled out with empty rows. A real corpus's epoch has a
    few among thousands; newstest2014's at 25,000 tokens has one among the first three on
    each side."""
    return [batch for batch in batches if np.count_nonzero(batch[1], axis=1).all()][:steps]


def padding_fractions(batches):
    """(source, target) fraction of the batches' positions that hold padding."""
    fractions = []
    for key in ("inputs", "targets"):
        positions = sum(features[key].size for features, _ in batches)
        real = sum(int(np.count_nonzero(features[key])) for features, _ in batches)
        fractions.append(1 - real / positions)
    return tuple(fractions)


def training_rate(backend, pairs, batching, batch_tokens, steps, warmup, overrides=""):
    """Real target tokens/s of transformer_base steps (with hparams `overrides`) on the epoch's
    first `steps` full batches: what a process of its own runs, under `backend` (KERAS_BACKEND set
    by the caller)."""
    if backend == "tensorflow":
        from t2t_repro.cli import quiet_tensorflow

        quiet_tensorflow.import_tensorflow()  # before anything imports it: see the module
    from t2t_repro.hparams import create_hparams
    from t2t_repro.models.transformer import Transformer
    from t2t_repro.training.run import compile_for_training, train_step_arguments

    batches = timed_batches(epoch_batches(pairs, batching, batch_tokens), steps)
    hparams = create_hparams("transformer_base", ",".join(
        filter(None, [f"packed={batching == 'packed'}", overrides])))
    vocab_size = 1 + max(max(max(source), max(target)) for source, target in pairs)
    model = compile_for_training(Transformer(hparams, vocab_size, vocab_size).build_weights(),
                                 hparams)
    step_arguments = train_step_arguments(hparams, micro_batches=1)  # a step is one batch
    if backend == "jax":
        from t2t_repro.training.jax.train_step import JaxTrainStep

        update = JaxTrainStep(model, **step_arguments)
    else:
        import tensorflow as tf

        from t2t_repro.training.tensorflow.train_step import TensorFlowTrainStep

        update = TensorFlowTrainStep(model, tf.distribute.get_strategy(), **step_arguments)
    shapes = {features["targets"].shape: (features, targets) for features, targets in batches}
    for batch in [*shapes.values(), *batches[:warmup]]:  # traces and compiles every shape
        update(iter([batch]))
    started = time.perf_counter()
    for batch in batches:
        update(iter([batch]))
    seconds = time.perf_counter() - started
    return sum(int(np.count_nonzero(targets)) for _, targets in batches) / seconds


def measure(backend, pairs, batching, batch_tokens, steps, warmup, overrides):
    """`training_rate` in a fresh process under `backend`; (tokens/s, peak bytes)."""
    previous = os.environ.get("KERAS_BACKEND")
    os.environ["KERAS_BACKEND"] = backend
    try:
        return run_in_own_process(training_rate, backend, pairs, batching, batch_tokens, steps,
                                  warmup, overrides)
    finally:
        if previous is None:
            del os.environ["KERAS_BACKEND"]
        else:
            os.environ["KERAS_BACKEND"] = previous


def main(argv):
    parser = OneLineErrorParser(prog="python -m t2t_repro.bench packing",
                                description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_root", default=DEFAULT_DATA_ROOT)
    parser.add_argument("--batch_tokens", type=comma_list(int_at_least(MAX_LENGTH)),
                        default=[4096],
                        help=f"comma-separated budgets, each at least max_length {MAX_LENGTH} "
                             f"(the paper's: 25000)")
    parser.add_argument("--backends", default="tensorflow,jax",
                        type=comma_list(one_of(*BACKEND_BATCHING), may_be_empty=True),
                        help="backends to time training under; empty: padding only")
    parser.add_argument("--steps", type=positive_int, default=4, help="timed steps per contender")
    parser.add_argument("--warmup", type=non_negative_int, default=1,
                        help="untimed steps per contender")
    parser.add_argument("--hparams", default="",
                        help="transformer_base overrides for every contender, e.g. "
                             "dtype_policy=mixed_bfloat16")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as work:
        sources = newstest2014(args.data_root, "en")
        encoded, _ = encode_with_shared_vocabulary(
            args.data_root, work, sources + newstest2014(args.data_root, "de"))
    pairs = list(zip(encoded[: len(sources)], encoded[len(sources):]))
    rows = []
    for budget in args.batch_tokens:
        epochs = {batching: epoch_batches(pairs, batching, budget) for batching in BATCHINGS}
        for which, chosen in (("", lambda batches: batches),
                              (f" in the first {args.steps} full batches",
                               lambda batches: timed_batches(batches, args.steps))):
            padding = {batching: padding_fractions(chosen(batches))
                       for batching, batches in epochs.items()}
            for batching in BATCHINGS[:2]:
                for side, index in (("source", 0), ("target", 1)):
                    rows.append((f"{budget} tokens: {side} padding{which}, {batching}",
                                 100 * padding["packed"][index], "% packed", batching,
                                 100 * padding[batching][index]))
        for backend in args.backends:
            bucketed = BACKEND_BATCHING[backend]
            figures = {batching: measure(backend, pairs, batching, budget, args.steps,
                                         args.warmup, args.hparams)
                       for batching in (bucketed, "packed")}
            rows.append((f"{budget} tokens: {backend} training, packed", figures["packed"][0],
                         "target tok/s", bucketed, figures[bucketed][0], figures["packed"][1],
                         figures[bucketed][1]))
    from t2t_repro.bench.report import format_table

    model = f"transformer_base ({args.hparams})" if args.hparams else "transformer_base"
    title = (f"Packed rows beside length-bucketed batches: newstest2014 ({len(pairs)} pairs, "
             f"37,000-piece vocabulary), max_length {MAX_LENGTH}; padding over one epoch and "
             f"over the timed batches; "
             f"{model} training steps on the epoch's first {args.steps} full batches, each "
             f"backend and batching in a process of its own (peak memory: its peak resident "
             f"size)")
    print(format_table(rows, title))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
