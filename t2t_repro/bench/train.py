"""Training-step speed beside PyTorch (DESIGN §7's protocol).

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
Each contender takes `--warmup` untimed steps (tracing, compiling), then the contenders take
turns, one timed step each, `--steps` rounds, so a change in machine speed hits all alike; a
contender's figure is its median step. Reported: real target tokens per second, and model
GFLOP/s: the step's matmul FLOPs counted from the batch's real lengths (`models.flops`, forward
and backward) over the step's time. A check that both sides train the same model: their
trainable parameter counts, which differ only by what PyTorch's layers add.
"""

import argparse
import importlib.util
import itertools
import statistics
import tempfile
import time

import numpy as np

from t2t_repro.bench.newstest import newstest2014, shared_vocabulary_problem
from t2t_repro.bench.pipeline import DEFAULT_DATA_ROOT

GOAL_TIMES_TORCH_COMPILE = 1.2


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


def our_training_step(problem, hparams, inputs, targets, jit_compile):
    """`(step, trainable parameter count)`: `step()` runs one `TensorFlowTrainStep` update of a new
    model."""
    import tensorflow as tf

    from t2t_repro.training.run import build_model, compile_for_training
    from t2t_repro.training.tensorflow.train_step import TensorFlowTrainStep

    model = compile_for_training(build_model("transformer", hparams, problem), hparams)
    update = TensorFlowTrainStep(model, tf.distribute.get_strategy(), hparams.label_smoothing,
                       jit_compile=jit_compile)
    same_batch = itertools.repeat(({"inputs": tf.constant(inputs),
                                    "targets": tf.constant(targets)}, tf.constant(targets)))
    return lambda: update(same_batch), sum(int(np.prod(v.shape))
                                           for v in model.trainable_variables)


def contenders(problem, hparams, inputs, targets, skip_peer):
    """{name: (step, parameter count)}, and a line saying why the peer is missing, if it is."""
    steps = {"t2t_repro, as the trainer runs it": our_training_step(
                 problem, hparams, inputs, targets, jit_compile=False),
             "t2t_repro with XLA": our_training_step(
                 problem, hparams, inputs, targets, jit_compile=True)}
    if skip_peer:
        return steps, "peer skipped (--skip_peer)"
    if importlib.util.find_spec("torch") is None:
        return steps, "PyTorch is not installed: pip install -e '.[bench]'"
    from t2t_repro.bench import torch_peer

    vocab = problem.target_vocab_size
    steps["PyTorch eager"] = torch_peer.training_step(hparams, vocab, inputs, targets)
    steps["torch.compile"] = torch_peer.training_step(hparams, vocab, inputs, targets,
                                                      compile_model=True)
    return steps, None


def median_step_seconds(steps, warmup, rounds):
    """{name: median seconds of a step}, the contenders taking turns after their warm-up."""
    for step, _ in steps.values():
        for _ in range(warmup):
            step()
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, (step, _) in steps.items():
            started = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(seconds) for name, seconds in times.items()}


def main(argv):
    parser = argparse.ArgumentParser(prog="python -m t2t_repro.bench train",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_root", default=DEFAULT_DATA_ROOT,
                        help="the shared data folder holding multi30k_ende/ and wmt14_ende/")
    parser.add_argument("--batch_tokens", type=int, default=4096,
                        help="padded target tokens per batch (protocol: 4096)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per contender")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per contender")
    parser.add_argument("--skip_peer", action="store_true", help="do not run PyTorch")
    args = parser.parse_args(argv)

    from t2t_repro.hparams import create_hparams
    from t2t_repro.models.flops import training_flops

    hparams = create_hparams("transformer_base")
    with tempfile.TemporaryDirectory() as work:
        problem = shared_vocabulary_problem(args.data_root, work)
        inputs, targets = median_batch(
            [problem.encode(line) for line in newstest2014(args.data_root, "en")],
            [problem.encode(line) for line in newstest2014(args.data_root, "de")],
            args.batch_tokens)
        steps, missing_peer = contenders(problem, hparams, inputs, targets, args.skip_peer)
        seconds = median_step_seconds(steps, args.warmup, args.steps)

    tokens = int(np.count_nonzero(targets))
    flops = training_flops(hparams, problem.target_vocab_size).of_batch(
        np.count_nonzero(inputs, axis=1), np.count_nonzero(targets, axis=1))
    print(report(seconds, tokens, flops, inputs, targets, hparams, problem.target_vocab_size))
    if missing_peer:
        print(missing_peer)
    else:
        print(parameter_check(steps, hparams))
        ratio = seconds["torch.compile"] / seconds["t2t_repro, as the trainer runs it"]
        verdict = "met" if ratio >= GOAL_TIMES_TORCH_COMPILE else "MISSED"
        print(f"goal: t2t_repro >= {GOAL_TIMES_TORCH_COMPILE}x torch.compile: {verdict} "
              f"({ratio:.2f}x)")


def report(seconds, tokens, flops, inputs, targets, hparams, vocab_size):
    """The side-by-side table: every contender against torch.compile (when it ran)."""
    from t2t_repro.bench.report import format_table
    from t2t_repro.models.flops import layer_counts

    peer = "torch.compile" if "torch.compile" in seconds else None
    rows = []
    for name, step_seconds in seconds.items():
        compared = peer if peer and name != peer else ""
        rows.append((name, tokens / step_seconds, "tok/s", compared,
                     tokens / seconds[peer] if compared else None))
    rows += [(f"{name}: model FLOP rate", flops / step_seconds / 1e9, "GFLOP/s", "", None)
             for name, step_seconds in seconds.items()]
    encoder_layers, decoder_layers = layer_counts(hparams)
    title = (f"Training step (forward, label-smoothed loss, backward, Adam), transformer_base "
             f"(d_model {hparams.hidden_size}, {hparams.num_heads} heads, feed-forward "
             f"{hparams.filter_size}, {encoder_layers}+{decoder_layers} layers), "
             f"vocab {vocab_size}: one newstest2014 batch of {len(inputs)} pairs, padded to "
             f"{inputs.shape[1]} x {targets.shape[1]} tokens, {tokens:,} real target tokens, "
             f"{flops / 1e12:.2f} TFLOP per step (matmuls, real lengths); median step")
    return format_table(rows, title)


def parameter_check(steps, hparams):
    """A line comparing the trainable parameter counts: PyTorch's should exceed ours by exactly
    its attention biases and end-of-stack LayerNorms (`torch_peer.parameters_beyond_ours`)."""
    from t2t_repro.bench.torch_peer import parameters_beyond_ours

    ours, theirs = steps["t2t_repro, as the trainer runs it"][1], steps["torch.compile"][1]
    expected = parameters_beyond_ours(hparams)
    verdict = "the same model otherwise" if theirs - ours == expected else (
        f"UNEXPECTED: {expected:,} expected")
    return (f"trainable parameters: t2t_repro {ours:,}, PyTorch {theirs:,}; PyTorch has "
            f"{theirs - ours:+,}: biases on its attention projections (ours have none) and a "
            f"LayerNorm ending each stack: {verdict}")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
