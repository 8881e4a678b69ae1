"""Beam-search decoding speed beside CTranslate2, and with the attention cache and without it
(DESIGN §7's protocol).

    python -m t2t_repro.bench decode [--data_root ../shared/data] [--sentences 500]
        [--uncached_every 4] [--skip_peer] [--precisions bfloat16,int8]

In one run, on this machine:
  1. a 37,000-piece BPE vocabulary from Multi30k + newstest2013 (as `bench pipeline`);
  2. the first `--sentences` lines of newstest2014.en, encoded, sorted by length, in batches of
     32; each batch decodes exactly round(1.1 × its longest source) tokens (EOS is never
     chosen), beam 4, α 0.6, so every run does the same work whatever the weights;
  3. transformer_base sizes with random weights: the cached incremental decoder over every
     batch, its search run as one compiled graph loop and then as the host loop (a Python loop
     over the compiled step, syncing with the host every position); then the uncached decoder
     (whole prefix recomputed each step) and the cached one again on every
     `--uncached_every`-th batch, the same batches for both;
  4. the cached decoder on copies of the model in each of `--precisions`
     (`decoding.precision`: bfloat16 weights and compute, int8 dense-layer weights), beside
     CTranslate2 float32 and int8 on the same weights.
One batch of each compiled shape is decoded untimed first (tracing). Tokens are the best
hypothesis's output tokens: a batch of 32 sentences forced to length n counts 32·n. Every
contender runs in this one process; its peak memory is the process's peak resident size while
it ran (`peak_memory`), which includes the model and what earlier contenders left.
"""

import argparse
import importlib.util
import os
import tempfile
import time
from typing import NamedTuple

import numpy as np

from t2t_repro.bench.newstest import newstest2014, shared_vocabulary_problem
from t2t_repro.bench.peak_memory import peak_bytes, reset_peak
from t2t_repro.bench.pipeline import DEFAULT_DATA_ROOT
from t2t_repro.decoding.precision import model_in_precision
from t2t_repro.decoding.transformer_search import padded_length

BATCH_SIZE = 32
BEAM_SIZE = 4
ALPHA = 0.6
GOAL_SPEEDUP = 5


def forced_batches(id_lists):
    """Length-sorted batches of BATCH_SIZE with their forced output length."""
    ordered = sorted(id_lists, key=len)
    batches = []
    for start in range(0, len(ordered), BATCH_SIZE):
        rows = ordered[start : start + BATCH_SIZE]
        source = np.zeros((len(rows), max(map(len, rows))), np.int32)
        for row, ids in enumerate(rows):
            source[row, : len(ids)] = ids
        batches.append((source, round(1.1 * source.shape[1])))
    return batches


class TimedDecode(NamedTuple):
    """A decoding run's figures: output tokens, seconds, the best outputs, and the process's
    peak resident bytes while it ran."""
    tokens: int
    seconds: float
    outputs: list
    peak_bytes: int


def timed_decode(search, batches):
    """`TimedDecode` of decoding `batches`, after an untimed decode of one batch of each shape
    the search compiles (rows, and source and output lengths as padded)."""
    reset_peak()
    shapes = {}
    for source, length in batches:
        key = (len(source), padded_length(source.shape[1]), padded_length(length))
        shapes.setdefault(key, (source, length))
    for source, length in shapes.values():
        search(source, np.full(len(source), length))
    outputs, started = [], time.perf_counter()
    for source, length in batches:
        ids = search(source, np.full(len(source), length)).best()
        assert ids.shape[1] == length, "a forced-length decode stopped early"
        outputs += ids.tolist()
    seconds = time.perf_counter() - started
    return TimedDecode(sum(map(len, outputs)), seconds, outputs, peak_bytes())


def ctranslate2_decode(ct2_dir, tokens, batches):
    """`TimedDecode` (best outputs as ids) of CTranslate2 decoding `batches` with beam
    BEAM_SIZE, each forced to its length as ours is, on every core, after one untimed batch."""
    import ctranslate2

    reset_peak()
    translator = ctranslate2.Translator(ct2_dir, device="cpu", inter_threads=1,
                                        intra_threads=os.cpu_count())

    def translate(source, length):
        rows = [[tokens[i] for i in row if i] for row in source]
        return translator.translate_batch(rows, beam_size=BEAM_SIZE, min_decoding_length=length,
                                          max_decoding_length=length, max_batch_size=BATCH_SIZE)

    translate(*batches[0])
    results, started = [], time.perf_counter()
    for source, length in batches:
        results += translate(source, length)
    seconds = time.perf_counter() - started
    ids = {token: i for i, token in enumerate(tokens)}
    outputs = [[ids[token] for token in result.hypotheses[0]] for result in results]
    assert [len(o) for o in outputs] == [length for source, length in batches
                                         for _ in source], "a forced-length decode stopped early"
    return TimedDecode(sum(map(len, outputs)), seconds, outputs, peak_bytes())


def peer_figures(model, problem, batches, work):
    """{"float32": (tokens, seconds), "int8": ...} of CTranslate2 on the same weights, or a
    string saying why there are none."""
    if importlib.util.find_spec("ctranslate2") is None:
        return "CTranslate2 is not installed: pip install -e '.[bench]'"
    from t2t_repro.serving.ctranslate2_model import vocabulary_tokens, write_ctranslate2_model

    tokens = vocabulary_tokens(problem, "target")
    figures = {}
    for quantization in ("float32", "int8"):
        ct2_dir = os.path.join(work, f"ct2_{quantization}")
        write_ctranslate2_model(model, problem, ct2_dir, quantization)
        figures[quantization] = ctranslate2_decode(ct2_dir, tokens, batches)
    return figures


def main(argv):
    parser = argparse.ArgumentParser(prog="python -m t2t_repro.bench decode",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_root", default=DEFAULT_DATA_ROOT,
                        help="the shared data folder holding multi30k_ende/ and wmt14_ende/")
    parser.add_argument("--sentences", type=int, default=500,
                        help="how many newstest2014 lines to decode (protocol: 500)")
    parser.add_argument("--uncached_every", type=int, default=4,
                        help="time the uncached decoder on every n-th batch (1: all batches; "
                             "0: neither it nor the host loop)")
    parser.add_argument("--skip_peer", action="store_true", help="do not run CTranslate2")
    parser.add_argument("--precisions", default="bfloat16,int8",
                        help="also decode with copies of the model in these precisions "
                             "(bfloat16, int8; empty: none)")
    args = parser.parse_args(argv)

    from t2t_repro.decoding.transformer_search import TransformerBeamSearch
    from t2t_repro.hparams import create_hparams
    from t2t_repro.training.run import build_model

    def search(use_cache, loop="graph", jit_compile=False):
        return TransformerBeamSearch(model, BEAM_SIZE, ALPHA, use_cache=use_cache,
                                     force_max_length=True, jit_compile=jit_compile, loop=loop)

    with tempfile.TemporaryDirectory() as work:
        problem = shared_vocabulary_problem(args.data_root, work)
        sentences = newstest2014(args.data_root, "en", args.sentences)
        batches = forced_batches([problem.encode(sentence) for sentence in sentences])
        model = build_model("transformer", create_hparams("transformer_base"), problem)
        cached = timed_decode(search(True), batches)
        cached_xla = timed_decode(search(True, jit_compile=True), batches)
        in_precision = {precision: timed_decode(TransformerBeamSearch(
                            model_in_precision(model, precision), BEAM_SIZE, ALPHA,
                            force_max_length=True), batches)
                        for precision in filter(None, args.precisions.split(","))}
        peers = "skipped (--skip_peer)" if args.skip_peer else peer_figures(
            model, problem, batches, work)

    def rate(measured):
        return measured.tokens / measured.seconds

    ours = {"t2t_repro, as the decoder runs it": cached, "t2t_repro with XLA": cached_xla}
    if isinstance(peers, dict):
        rows = [(name, rate(figures), "tok/s", "CTranslate2 float32", rate(peers["float32"]),
                 figures.peak_bytes, peers["float32"].peak_bytes)
                for name, figures in ours.items()]
        rows.append(("t2t_repro with XLA", rate(cached_xla), "tok/s", "CTranslate2 int8",
                     rate(peers["int8"]), cached_xla.peak_bytes, peers["int8"].peak_bytes))
        for precision, figures in in_precision.items():
            peer = "int8" if precision == "int8" else "float32"
            rows.append((f"t2t_repro {precision}", rate(figures), "tok/s",
                         f"CTranslate2 {peer}", rate(peers[peer]), figures.peak_bytes,
                         peers[peer].peak_bytes))
    else:
        alone = {**ours, **{f"t2t_repro {precision}": figures
                            for precision, figures in in_precision.items()}}
        rows = [(name, rate(figures), "tok/s", "", None, figures.peak_bytes, None)
                for name, figures in alone.items()]
    if args.uncached_every:
        sample = batches[:: args.uncached_every]
        cached_host_loop = timed_decode(search(True, "host"), batches)
        cached_sample = timed_decode(search(True), sample)
        uncached_sample = timed_decode(search(False), sample)
        rows += [
            ("t2t_repro, host loop", rate(cached_host_loop), "tok/s", "graph loop", rate(cached),
             cached_host_loop.peak_bytes, cached.peak_bytes),
            (f"cached vs uncached, {len(sample)} batches", rate(cached_sample), "tok/s",
             "uncached (full prefix)", rate(uncached_sample), cached_sample.peak_bytes,
             uncached_sample.peak_bytes),
        ]
    from t2t_repro.bench.report import format_table

    title = (f"Beam-search decoding, transformer_base sizes (random weights, the same in every "
             f"row), vocab {problem.target_vocab_size}: first {len(sentences)} newstest2014 "
             f"sentences, batches of {BATCH_SIZE}, beam {BEAM_SIZE}, forced length "
             f"round(1.1 x longest source) = {cached.tokens:,} tokens in {len(batches)} "
             f"batches")
    print(format_table(rows, title))
    if isinstance(peers, dict):
        same = sum(a == b for a, b in zip(cached.outputs, peers["float32"].outputs))
        print(f"best hypotheses identical to CTranslate2 float32's on {same} of "
              f"{len(cached.outputs)} sentences (equal forced lengths: the ranking is log P "
              f"alone)")
        for precision, figures in in_precision.items():
            same = sum(a == b for a, b in zip(figures.outputs, cached.outputs))
            print(f"t2t_repro {precision}: best hypotheses identical to our float32's on "
                  f"{same} of {len(cached.outputs)} sentences")
    else:
        print(f"peer: {peers}")
    if args.uncached_every:
        speedup = rate(cached_sample) / rate(uncached_sample)
        verdict = "met" if speedup >= GOAL_SPEEDUP else "MISSED"
        print(f"goal: cached >= {GOAL_SPEEDUP}x uncached: {verdict} ({speedup:.1f}x on the same "
              f"{sum(len(s) for s, _ in sample)} sentences)")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
