"""Training-step speed under JAX, beside PyTorch on the same device: `bench train --backend=jax`.

    KERAS_BACKEND=jax python -m t2t_repro.bench train --backend=jax [--batch_tokens 25000]
        [--hparams_sets transformer_base,transformer_big] [--dtypes float32,mixed_bfloat16]
        [--steps 10] [--warmup 3] [--peak_tflops P] [--torch_eager] [--skip_peer]
        [--variants "fused_attention=true;..."] [--decode_sentences 500] [--profile_dir DIR]

Needs jax, keras, numpy and sentencepiece (no TensorFlow). In one run, on JAX's default device
(a GPU when there is one):
  1. the batch: newstest2014 pairs encoded with the 37,000-piece shared vocabulary (trained
     here, as `bench train` does), sorted by length and cut into batches of at most
     `--batch_tokens` padded target tokens; the batch holding the median pair. 25,000 is the
     paper's batch (§5.1, ~25k target tokens per step over 8 GPUs).
  2. for every hparams set and dtype policy: the trainer's JAX step (`JaxTrainStep`: forward,
     label-smoothed loss, backward, Adam, as one jitted update) and the peer, PyTorch's
     `nn.Transformer` with the same sizes, loss and optimizer (`torch_peer`), under
     `torch.compile` (eager with `--torch_eager`), bfloat16 through autocast where ours is
     mixed_bfloat16. Each runs in a process of its own, ours first, so that its host and
     device memory is returned before the next (`peak_memory`); the peer runs on the device
     ours names and never starts JAX, whose GPU client would hold most of the GPU's memory.
     Each takes `--warmup` untimed steps, then `--steps` timed; a figure is the median step,
     beside the process's peak resident (host) memory. Each of `--variants` (hparams
     overrides, e.g. `fused_attention=true`) is then our step once more, in a process of its
     own, beside our plain step: one lever at a time.
  3. optionally (`--profile_dir`) each of our steps traced for `--profile_steps` more steps
     with `jax.profiler` into a folder of DIR, and the device's kernel time by kind printed
     (`kernel_profile`);
  4. optionally (`--decode_sentences`) beam-search decoding speed of transformer_base with
     random weights under JAX: `bench decode`'s protocol (beam 4, batches of 32, forced
     lengths), our decoder only.
Reported: real target tokens per second, model TFLOP/s (matmul FLOPs of the batch's real
lengths, forward and backward, `models.flops`) and model FLOPs utilisation against the
device's dense peak at that dtype (`peak_flops`: TF32 for float32, which XLA uses on such
GPUs; `--peak_tflops` replaces it for every dtype).
"""

import importlib.util
import itertools
import os
import re
import tempfile
import time
import typing

import numpy as np

from t2t_repro.bench import kernel_profile
from t2t_repro.bench.arguments import (comma_list, non_negative_int, one_of, positive_float,
                                       positive_int)
from t2t_repro.bench.newstest import encode_with_shared_vocabulary, newstest2014
from t2t_repro.bench.peak_memory import peak_bytes, reset_peak, run_in_own_process
from t2t_repro.bench.pipeline import DEFAULT_DATA_ROOT
from t2t_repro.bench.train import median_batch, median_step_seconds
from t2t_repro.cli.one_line_parser import OneLineErrorParser

OURS = "t2t_repro (JAX)"
PEER_DTYPES = ("float32", "mixed_bfloat16")  # the policies the PyTorch peer runs as well

GOALS_MFU = {"transformer_base": 0.45, "transformer_big": 0.50}


def our_jax_step(hparams, vocab_size, inputs, targets):
    """`(step, trainable parameter count)`: `step()` runs one `JaxTrainStep` update of a new
    model under `hparams.dtype_policy`."""
    from t2t_repro.training.jax.train_step import JaxTrainStep
    from t2t_repro.training.run import compile_for_training, train_step_arguments
    from t2t_repro.models.transformer import Transformer

    model = Transformer(hparams, vocab_size, vocab_size, dtype=hparams.dtype_policy)
    model = compile_for_training(model.build_weights(), hparams)
    update = JaxTrainStep(model, **train_step_arguments(hparams, micro_batches=1))
    same_batch = itertools.repeat(({"inputs": inputs, "targets": targets}, targets))
    return lambda: update(same_batch), model.count_params()


def measure_contender(name, hparams, vocab_size, inputs, targets, warmup, steps, peak_tflops,
                      peer_device="cpu", profile=None):
    """What contender `name` (OURS or `peer_name`'s) runs in its own process: `(median step
    seconds, OurDevice or None)`. The peer runs on `peer_device`, which our process found
    (`OurDevice.torch_device`): the peer's process never starts JAX, whose GPU client would
    take most of the GPU's memory, which the peer needs. `profile`: `(label, folder, steps)`
    to trace that many more of our steps into the folder and print where the device's time
    went."""
    if name != OURS:
        step = _torch_peer_step(name, hparams, vocab_size, inputs, targets, peer_device)
        return median_step_seconds(step, warmup, steps), None
    step, _ = our_jax_step(hparams, vocab_size, inputs, targets)
    seconds = median_step_seconds(step, warmup, steps)
    if profile:
        label, folder, profile_steps = profile
        trace = kernel_profile.trace_steps(step, profile_steps, folder)
        print(kernel_profile.format_device_time(
            label, kernel_profile.device_time(trace, profile_steps)), flush=True)
    return seconds, our_device(hparams.dtype_policy, peak_tflops)


class OurDevice(typing.NamedTuple):
    """JAX's default device: its name, its peak TFLOPS at a dtype policy (None when unknown),
    and the PyTorch device that is the same hardware ("cuda" or "cpu")."""
    name: str
    peak_tflops: typing.Optional[float]
    torch_device: str


def our_device(dtype_policy, peak_tflops):
    """`OurDevice` of JAX's default device; `peak_tflops`, when given, replaces the lookup."""
    import jax

    from t2t_repro.training.jax.run import peak_tflops_of

    device = jax.devices()[0]
    return OurDevice(device.device_kind, peak_tflops or peak_tflops_of(device, dtype_policy),
                     "cuda" if device.platform == "gpu" else "cpu")


def main(argv):
    parser = OneLineErrorParser(prog="python -m t2t_repro.bench train --backend=jax",
                                description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_root", default=DEFAULT_DATA_ROOT)
    parser.add_argument("--batch_tokens", type=positive_int, default=25000,
                        help="padded target tokens per batch (the paper's: ~25,000)")
    parser.add_argument("--hparams_sets", default="transformer_base,transformer_big")
    parser.add_argument("--dtypes", type=comma_list(one_of(*PEER_DTYPES)),
                        default=list(PEER_DTYPES),
                        help="dtype policies: float32, mixed_bfloat16 (those the PyTorch peer "
                             "has; mixed_float16 trains, but is not measured here)")
    parser.add_argument("--hparams", default="",
                        help="overrides of every hparams set, e.g. layer_prepostprocess_dropout=0")
    parser.add_argument("--steps", type=positive_int, default=10, help="timed steps per contender")
    parser.add_argument("--warmup", type=non_negative_int, default=3,
                        help="untimed steps per contender")
    parser.add_argument("--peak_tflops", type=positive_float, default=None,
                        help="one device's peak TFLOPS (default: looked up by its name)")
    parser.add_argument("--torch_eager", action="store_true",
                        help="the peer runs eagerly instead of under torch.compile")
    parser.add_argument("--skip_peer", action="store_true", help="do not run PyTorch")
    parser.add_argument("--length_multiple", type=positive_int, default=1,
                        help="pad the batch's lengths to a multiple of this (the JAX trainer's "
                             "buckets are multiples of 8; cuDNN's fused attention needs even)")
    parser.add_argument("--variants", default="",
                        help="semicolon-separated hparams overrides, each measured as our step "
                             "beside the plain one, e.g. 'fused_attention=true'")
    parser.add_argument("--decode_sentences", type=non_negative_int, default=0,
                        help="also decode this many newstest2014 sentences (0: none)")
    parser.add_argument("--profile_dir", default="",
                        help="trace each of our steps into a folder of this one (jax.profiler) "
                             "and print the device's kernel time by kind (the trace's host "
                             "memory counts in our peak)")
    parser.add_argument("--profile_steps", type=positive_int, default=3,
                        help="steps each trace holds")
    args = parser.parse_args(argv)

    def profile(label):
        if not args.profile_dir:
            return None
        folder = os.path.join(args.profile_dir, re.sub(r"[^A-Za-z0-9_.-]+", "_", label))
        return label, folder, args.profile_steps

    from t2t_repro.hparams import create_hparams
    from t2t_repro.models.flops import training_flops

    with tempfile.TemporaryDirectory() as work:
        started = time.perf_counter()
        sources = newstest2014(args.data_root, "en")
        encoded, vocab_size = encode_with_shared_vocabulary(
            args.data_root, work, sources + newstest2014(args.data_root, "de"))
    print(f"vocabulary ({vocab_size} pieces) trained and newstest2014 encoded in "
          f"{time.perf_counter() - started:.0f} s")
    inputs, targets = median_batch(encoded[: len(sources)], encoded[len(sources):],
                                   args.batch_tokens)
    inputs, targets = (_padded_to_multiple(ids, args.length_multiple) for ids in (inputs, targets))
    tokens = int(np.count_nonzero(targets))
    peer = None if args.skip_peer else peer_name(args.torch_eager)
    rows, peaks = [], set()
    for set_name in args.hparams_sets.split(","):
        for dtype in args.dtypes:
            hparams = create_hparams(set_name, ",".join(
                filter(None, [f"dtype_policy={dtype}", args.hparams])))
            measured = {OURS: run_in_own_process(
                measure_contender, OURS, hparams, vocab_size, inputs, targets, args.warmup,
                args.steps, args.peak_tflops, "cpu", profile(f"{set_name} {dtype}"))}
            (_, (device, peak, torch_device)), _ = measured[OURS]
            peaks.add(peak)
            if peer:
                measured[peer] = run_in_own_process(
                    measure_contender, peer, hparams, vocab_size, inputs, targets,
                    args.warmup, args.steps, args.peak_tflops, torch_device)
            flops = training_flops(hparams, vocab_size).of_batch(
                np.count_nonzero(inputs, axis=1), np.count_nonzero(targets, axis=1))
            rows += _rows(set_name, dtype, measured, tokens, flops, peak, peer)
            for variant in filter(None, args.variants.split(";")):
                variant_hparams = create_hparams(set_name, ",".join(
                    filter(None, [f"dtype_policy={dtype}", args.hparams, variant])))
                changed = run_in_own_process(
                    measure_contender, OURS, variant_hparams, vocab_size, inputs, targets,
                    args.warmup, args.steps, args.peak_tflops, "cpu",
                    profile(f"{set_name} {dtype} {variant}"))
                rows += _variant_rows(f"{set_name} {dtype} {variant}", changed, measured[OURS],
                                      tokens, flops, peak)
    if args.decode_sentences:
        rows.append(_decode_row(args.decode_sentences, vocab_size, encoded))
    from t2t_repro.bench.report import format_table

    title = (f"Training step under JAX on {device} (forward, label-smoothed loss, backward, "
             f"Adam), vocab {vocab_size}: one newstest2014 batch of {len(inputs)} pairs, padded "
             f"to {inputs.shape[1]} x {targets.shape[1]} tokens, {tokens:,} real target tokens; "
             f"median step of {args.steps}; {mfu_clause(device, peaks)}")
    print(format_table(rows, title))
    if peer is None:
        print("peer: " + ("skipped (--skip_peer)" if args.skip_peer else
                          "PyTorch is not installed: pip install -e '.[bench]'"))


def mfu_clause(device, peaks):
    """What the table's title says of MFU, given the peaks (TFLOPS, None where unknown) of the
    rows: a CPU's is unknown unless --peak_tflops gives it, and without a peak no row has
    MFU."""
    if any(peaks):
        return f"MFU against {device}'s dense peak at the dtype"
    return f"no MFU: {device}'s peak is unknown (give --peak_tflops)"


def peer_name(eager):
    """The PyTorch peer's name, or None without PyTorch."""
    if importlib.util.find_spec("torch") is None:
        return None
    return f"PyTorch {'eager' if eager else 'torch.compile'}"


def _torch_peer_step(name, hparams, vocab_size, inputs, targets, device):
    """The peer's step on PyTorch's `device` ("cuda" or "cpu")."""
    from t2t_repro.bench import torch_peer

    step, _ = torch_peer.training_step(
        hparams, vocab_size, inputs, targets, compile_model=name.endswith("torch.compile"),
        device=device, bfloat16=hparams.dtype_policy == "mixed_bfloat16")
    return step


def _rows(set_name, dtype, measured, tokens, flops, peak, peer):
    """Table rows of one hparams set and dtype. `measured`: {name: ((seconds, _), peak bytes)}."""
    (ours, _), our_memory = measured[OURS]
    (theirs, _), their_memory = measured[peer] if peer else ((None, None), None)
    label = f"{set_name} {dtype}"
    rows = [(f"{label}: {OURS}", tokens / ours, "tok/s", peer or "",
             tokens / theirs if peer else None, our_memory, their_memory)]
    rows.append((f"{label}: t2t_repro model TFLOP/s", flops / ours / 1e12, "TFLOP/s",
                 "PyTorch" if peer else "", flops / theirs / 1e12 if peer else None))
    if peak:
        goal = GOALS_MFU.get(set_name)
        rows.append((f"{label}: t2t_repro MFU (peak {peak:g} TFLOP/s)",
                     100 * flops / ours / (peak * 1e12), "%", "goal" if goal else "",
                     100 * goal if goal else None))
    return rows


def _padded_to_multiple(ids, multiple):
    """[rows, length] ids with zero columns added up to a multiple of `multiple`."""
    return np.pad(ids, ((0, 0), (0, -ids.shape[1] % multiple)))


def _variant_rows(label, changed, plain, tokens, flops, peak):
    """Our step under one variant beside our plain step: tok/s (with memory) and MFU."""
    (seconds, _), memory = changed
    (plain_seconds, _), plain_memory = plain
    rows = [(f"{label}: {OURS}", tokens / seconds, "tok/s", "without it", tokens / plain_seconds,
             memory, plain_memory)]
    if peak:
        rows.append((f"{label}: t2t_repro MFU", 100 * flops / seconds / (peak * 1e12), "%",
                     "without it", 100 * flops / plain_seconds / (peak * 1e12)))
    return rows


def _decode_row(count, vocab_size, encoded, hparams_set="transformer_base"):
    """Our beam search's output tokens/s on `bench decode`'s protocol, random weights, with
    the process's peak memory while it ran."""
    from t2t_repro.bench.decode import ALPHA, BEAM_SIZE, forced_batches, timed_decode
    from t2t_repro.decoding.transformer_search import TransformerBeamSearch
    from t2t_repro.hparams import create_hparams
    from t2t_repro.models.transformer import Transformer

    reset_peak()
    model = Transformer(create_hparams(hparams_set), vocab_size, vocab_size)
    search = TransformerBeamSearch(model.build_weights(), BEAM_SIZE, ALPHA,
                                   force_max_length=True)
    timed = timed_decode(search, forced_batches(encoded[:count]))
    return (f"{hparams_set} float32: beam-search decoding, {count} newstest2014 sentences",
            timed.tokens / timed.seconds, "tok/s", "", None, peak_bytes(), None)
