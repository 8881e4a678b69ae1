"""Beam-search decoding speed with the attention cache and without it (DESIGN §7's protocol).

    python -m t2t_repro.bench decode [--data_root ../shared/data] [--sentences 500]
        [--uncached_every 4] [--jit_compile]

In one run, on this machine:
  1. a 37,000-piece BPE vocabulary from Multi30k + newstest2013 (as `bench pipeline`);
  2. the first `--sentences` lines of newstest2014.en, encoded, sorted by length, in batches of
     32; each batch decodes exactly round(1.1 × its longest source) tokens (EOS is never
     chosen), beam 4, α 0.6, so every run does the same work whatever the weights;
  3. transformer_base sizes with random weights: the cached incremental decoder over every
     batch, its search run as one compiled graph loop and then as the host loop (a Python loop
     over the compiled step, syncing with the host every position); then the uncached decoder
     (whole prefix recomputed each step) and the cached one again on every
     `--uncached_every`-th batch, the same batches for both.
One batch of each compiled shape is decoded untimed first (tracing). Tokens are the best
hypothesis's output tokens: a batch of 32 sentences forced to length n counts 32·n.
"""

import argparse
import os
import tempfile
import time

import numpy as np

from t2t_repro.bench.pipeline import DEFAULT_DATA_ROOT, multi30k_tmp_dir
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


def timed_decode(search, batches):
    """(output tokens, seconds) for decoding `batches`, after an untimed decode of one batch of
    each shape the search compiles (rows, and source and output lengths as padded)."""
    shapes = {}
    for source, length in batches:
        key = (len(source), padded_length(source.shape[1]), padded_length(length))
        shapes.setdefault(key, (source, length))
    for source, length in shapes.values():
        search(source, np.full(len(source), length))
    tokens, started = 0, time.perf_counter()
    for source, length in batches:
        ids = search(source, np.full(len(source), length)).best()
        assert ids.shape[1] == length, "a forced-length decode stopped early"
        tokens += ids.shape[0] * ids.shape[1]
    return tokens, time.perf_counter() - started


def main(argv):
    parser = argparse.ArgumentParser(prog="python -m t2t_repro.bench decode",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_root", default=DEFAULT_DATA_ROOT,
                        help="the shared data folder holding multi30k_ende/ and wmt14_ende/")
    parser.add_argument("--sentences", type=int, default=500,
                        help="how many newstest2014 lines to decode (protocol: 500)")
    parser.add_argument("--uncached_every", type=int, default=4,
                        help="time the uncached decoder on every n-th batch (1: all batches)")
    parser.add_argument("--jit_compile", action="store_true",
                        help="compile the cached decoder with XLA (TensorFlow)")
    args = parser.parse_args(argv)

    from problems.translate_ende import TranslateEnde
    from t2t_repro.decoding.transformer_search import TransformerBeamSearch
    from t2t_repro.hparams import create_hparams
    from t2t_repro.training.loop import build_model

    with tempfile.TemporaryDirectory() as work:
        os.makedirs(os.path.join(work, "raw"))
        problem = TranslateEnde(data_dir=os.path.join(work, "data"),
                                data_hparams="vocab_size=37000,num_train_shards=1")
        problem.generate_data(multi30k_tmp_dir(args.data_root, os.path.join(work, "raw")),
                              download=False)
        with open(os.path.join(args.data_root, "wmt14_ende", "newstest2014.en"),
                  encoding="utf-8") as f:
            sentences = [line.rstrip("\n") for line, _ in zip(f, range(args.sentences))]
        batches = forced_batches([problem.encode(sentence) for sentence in sentences])
        model = build_model("transformer", create_hparams("transformer_base"), problem)

    def search(use_cache, loop="graph"):
        return TransformerBeamSearch(model, BEAM_SIZE, ALPHA, use_cache=use_cache,
                                     force_max_length=True, jit_compile=args.jit_compile,
                                     loop=loop)

    cached = timed_decode(search(True), batches)
    cached_host_loop = timed_decode(search(True, "host"), batches)
    sample = batches[:: args.uncached_every]
    cached_sample = timed_decode(search(True), sample)
    uncached_sample = timed_decode(search(False), sample)

    def rate(measured):
        return measured[0] / measured[1]

    rows = [
        (f"cached, all {len(batches)} batches", rate(cached), "tok/s",
         "same, host loop", rate(cached_host_loop)),
        (f"cached vs uncached, {len(sample)} batches", rate(cached_sample), "tok/s",
         "uncached (full prefix)", rate(uncached_sample)),
    ]
    from t2t_repro.bench.report import format_table

    title = (f"Beam-search decoding, transformer_base sizes (random weights), vocab "
             f"{problem.target_vocab_size}: first {len(sentences)} newstest2014 sentences, "
             f"batches of {BATCH_SIZE}, beam {BEAM_SIZE}, forced length round(1.1 x longest "
             f"source) = {cached[0]:,} tokens, {cached[1]:.0f} s"
             f"{', XLA' if args.jit_compile else ''}")
    print(format_table(rows, title))
    speedup = rate(cached_sample) / rate(uncached_sample)
    print(f"goal: cached >= {GOAL_SPEEDUP}x uncached: {'met' if speedup >= GOAL_SPEEDUP else 'MISSED'}"
          f" ({speedup:.1f}x on the same {sum(len(s) for s, _ in sample)} sentences)")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
