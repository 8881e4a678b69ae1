"""Training-step speed and memory beside PyTorch (DESIGN §7's protocol).

    python -m t2t_repro.bench train [--data_root ../shared/data] [--steps 5] [--warmup 2]
        [--batch_tokens 4096] [--skip_peer]

In one run, on this machine, every contender on the same batch:
  1. the batch: newstest2014 pairs encoded with the 37,000-piece shared vocabulary (as
     `bench decode`), sorted by length and cut into batches of at most `--batch_tokens` padded
     target tokens; the batch holding the median pair (DESIGN §7: about 151 sentences, source
     41 and target 27 tokens, ~3,970 real target tokens);
  2. t2t_repro's transformer_base step as the trainer runs it (`TensorFlowTrainStep`: forward,
     label-smoothed loss, backward, Adam), as a TensorFlow graph and with XLA;
  3. the peer (`bench.torch_peer`): PyTorch's `nn.Transformer` with the same sizes, tied
     embeddings, loss and optimizer, eager and under `torch.compile`.
Each contender runs in a process of its own, one after the other (`peak_memory`): four
transformer_base models with their optimizers do not fit a small machine together. It takes
`--warmup` untimed steps (tracing, compiling), then `--steps` timed ones; its figure is its
median step, and its memory the peak resident size of its process. Reported: real target
tokens per second, model GFLOP/s (the step's matmul FLOPs counted from the batch's real
lengths, `models.flops`, forward and backward, over the step's time) and peak memory. A check
that both sides train the same model: their trainable parameter counts, which differ only by
what PyTorch's layers add.
"""

import importlib.util
import itertools
import os
import statistics
import tempfile
import time

import numpy as np

from t2t_repro.bench.arguments import JAX_HELP, non_negative_int, positive_int
from t2t_repro.bench.newstest import encode_with_shared_vocabulary, newstest2014
from t2t_repro.bench.peak_memory import run_in_own_process
from t2t_repro.bench.pipeline import DEFAULT_DATA_ROOT
from t2t_repro.cli.one_line_parser import OneLineErrorParser

GOAL_TIMES_TORCH_COMPILE = 1.2
OURS = "t2t_repro, as the trainer runs it"
OURS_XLA = "t2t_repro with XLA"
PEERS = ("PyTorch eager", "torch.compile")


def median_batch(source_ids, target_ids, batch_tokens):
    """(inputs [rows, s], targets [rows, t]), 0-padded: the pairs sorted by length and cut into
    consecutive batches of at most `batch_tokens` padded target tokens; the one holding the
    median pair."""
    pairs = sorted(zip(source_ids, target_ids), key=lambda pair: (len(pair[1]), len(pair[0])))
    batches, start = [], 0
    while start < len(pairs):
        end = start + 1
        while end < len(pairs) and (end + 1 - start) * len(pairs[end][1]) <= batch_tokens:
            end += 1
        batches.append((start, end))
        start = end
    middle = len(pairs) // 2
    start, end = next((s, e) for s, e in batches if s <= middle < e)
    rows = pairs[start:end]
    inputs = np.zeros((len(rows), max(len(s) for s, _ in rows)), np.int32)
    targets = np.zeros((len(rows), max(len(t) for _, t in rows)), np.int32)
    for row, (source, target) in enumerate(rows):
        inputs[row, : len(source)], targets[row, : len(target)] = source, target
    return inputs, targets


def our_training_step(hparams, vocab_size, inputs, targets, jit_compile):
    """`(step, trainable parameter count)`: `step()` runs one `TensorFlowTrainStep` update of a new
    model."""
    from t2t_repro.cli import quiet_tensorflow

    quiet_tensorflow.import_tensorflow()  # a fresh process: before anything imports it
    import tensorflow as tf

    from t2t_repro.models.transformer import Transformer
    from t2t_repro.training.run import compile_for_training, train_step_arguments
    from t2t_repro.training.tensorflow.train_step import TensorFlowTrainStep

    model = Transformer(hparams, vocab_size, vocab_size).build_weights()
    model = compile_for_training(model, hparams)
    update = TensorFlowTrainStep(model, tf.distribute.get_strategy(), jit_compile=jit_compile,
                                 **train_step_arguments(hparams, micro_batches=1))
    same_batch = itertools.repeat(({"inputs": tf.constant(inputs),
                                    "targets": tf.constant(targets)}, tf.constant(targets)))
    return lambda: update(same_batch), sum(int(np.prod(v.shape))
                                           for v in model.trainable_variables)


def contender_step(name, hparams, vocab_size, inputs, targets):
    """`(step, trainable parameter count)` of contender `name` (OURS, OURS_XLA or a PEERS name)."""
    if name in PEERS:
        from t2t_repro.bench import torch_peer

        return torch_peer.training_step(hparams, vocab_size, inputs, targets,
                                        compile_model=name == "torch.compile")
    return our_training_step(hparams, vocab_size, inputs, targets, jit_compile=name == OURS_XLA)


def median_step_seconds(step, warmup, steps):
    """The median time of `steps` calls of `step()` after `warmup` untimed ones."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure_contender(name, hparams_set, vocab_size, inputs, targets, warmup, steps):
    """`(median step seconds, parameter count)` of contender `name`: what its own process runs.
    The peer's process runs Keras (which `torch_peer` uses for the sinusoid table) on NumPy, so
    that its memory holds no TensorFlow."""
    if name in PEERS:
        os.environ["KERAS_BACKEND"] = "numpy"  # before anything imports Keras here
    from t2t_repro.hparams import create_hparams

    step, parameters = contender_step(name, create_hparams(hparams_set), vocab_size, inputs,
                                      targets)
    return median_step_seconds(step, warmup, steps), parameters


def contender_names(skip_peer):
    """The contenders to run, and a line saying why the peer is missing, if it is."""
    if skip_peer:
        return (OURS, OURS_XLA), "peer skipped (--skip_peer)"
    if importlib.util.find_spec("torch") is None:
        return (OURS, OURS_XLA), "PyTorch is not installed: pip install -e '.[bench]'"
    return (OURS, OURS_XLA, *PEERS), None


def main(argv):
    parser = OneLineErrorParser(prog="python -m t2t_repro.bench train",
                                description=__doc__.split("\n\n")[0], epilog=JAX_HELP)
    parser.add_argument("--data_root", default=DEFAULT_DATA_ROOT,
                        help="the shared data folder holding multi30k_ende/ and wmt14_ende/")
    parser.add_argument("--batch_tokens", type=positive_int, default=4096,
                        help="padded target tokens per batch (protocol: 4096)")
    parser.add_argument("--steps", type=positive_int, default=5, help="timed steps per contender")
    parser.add_argument("--warmup", type=non_negative_int, default=2,
                        help="untimed steps per contender")
    parser.add_argument("--skip_peer", action="store_true", help="do not run PyTorch")
    args = parser.parse_args(argv)

    from t2t_repro.hparams import create_hparams
    from t2t_repro.models.flops import training_flops

    hparams_set = "transformer_base"
    with tempfile.TemporaryDirectory() as work:
        sources = newstest2014(args.data_root, "en")
        encoded, vocab_size = encode_with_shared_vocabulary(
            args.data_root, work, sources + newstest2014(args.data_root, "de"))
    inputs, targets = median_batch(encoded[: len(sources)], encoded[len(sources):],
                                   args.batch_tokens)
    names, missing_peer = contender_names(args.skip_peer)
    measured = {name: run_in_own_process(measure_contender, name, hparams_set, vocab_size,
                                         inputs, targets, args.warmup, args.steps)
                for name in names}

    hparams = create_hparams(hparams_set)
    tokens = int(np.count_nonzero(targets))
    flops = training_flops(hparams, vocab_size).of_batch(
        np.count_nonzero(inputs, axis=1), np.count_nonzero(targets, axis=1))
    print(report(measured, tokens, flops, inputs, targets, hparams, vocab_size))
    if missing_peer:
        print(missing_peer)
    else:
        print(parameter_check(measured, hparams))
        ratio = measured["torch.compile"][0][0] / measured[OURS][0][0]
        verdict = "met" if ratio >= GOAL_TIMES_TORCH_COMPILE else "MISSED"
        print(f"goal: t2t_repro >= {GOAL_TIMES_TORCH_COMPILE}x torch.compile: {verdict} "
              f"({ratio:.2f}x)")


def report(measured, tokens, flops, inputs, targets, hparams, vocab_size):
    """The side-by-side table: every contender against torch.compile (when it ran), with each
    process's peak memory. `measured`: {name: ((seconds, parameters), peak bytes)}."""
    from t2t_repro.bench.report import format_table
    from t2t_repro.models.flops import layer_counts

    seconds = {name: result[0] for name, (result, _) in measured.items()}
    peaks = {name: peak for name, (_, peak) in measured.items()}
    peer = "torch.compile" if "torch.compile" in seconds else None
    rows = []
    for name, step_seconds in seconds.items():
        compared = peer if peer and name != peer else ""
        rows.append((name, tokens / step_seconds, "tok/s", compared,
                     tokens / seconds[peer] if compared else None,
                     peaks[name], peaks[peer] if compared else None))
    rows += [(f"{name}: model FLOP rate", flops / step_seconds / 1e9, "GFLOP/s", "", None)
             for name, step_seconds in seconds.items()]
    encoder_layers, decoder_layers = layer_counts(hparams)
    title = (f"Training step (forward, label-smoothed loss, backward, Adam), transformer_base "
             f"(d_model {hparams.hidden_size}, {hparams.num_heads} heads, feed-forward "
             f"{hparams.filter_size}, {encoder_layers}+{decoder_layers} layers), "
             f"vocab {vocab_size}: one newstest2014 batch of {len(inputs)} pairs, padded to "
             f"{inputs.shape[1]} x {targets.shape[1]} tokens, {tokens:,} real target tokens, "
             f"{flops / 1e12:.2f} TFLOP per step (matmuls, real lengths); median step, each "
             f"contender in a process of its own (peak memory: that process's peak resident "
             f"size)")
    return format_table(rows, title)


def parameter_check(measured, hparams):
    """A line comparing the trainable parameter counts: PyTorch's should exceed ours by exactly
    its attention biases and end-of-stack LayerNorms (`torch_peer.parameters_beyond_ours`)."""
    from t2t_repro.bench.torch_peer import parameters_beyond_ours

    ours, theirs = measured[OURS][0][1], measured["torch.compile"][0][1]
    expected = parameters_beyond_ours(hparams)
    verdict = "the same model otherwise" if theirs - ours == expected else (
        f"UNEXPECTED: {expected:,} expected")
    return (f"trainable parameters: t2t_repro {ours:,}, PyTorch {theirs:,}; PyTorch has "
            f"{theirs - ours:+,}: biases on its attention projections (ours have none) and a "
            f"LayerNorm ending each stack: {verdict}")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
