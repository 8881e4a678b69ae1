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
hypothesis's output tokens: a batch of 32 sentences forced to length n counts 32·n. Each
contender runs in a process of its own, one after the other (`peak_memory`), which loads the
weights written once for all of them; its peak memory is that process's peak resident size
(the framework, the model, its decoding).
"""

import importlib.util
import os
import tempfile
import time
from typing import NamedTuple

import numpy as np

from t2t_repro.bench.arguments import comma_list, non_negative_int, one_of, positive_int
from t2t_repro.bench.newstest import (newstest2014, shared_vocabulary_problem,
                                      shared_vocabulary_problem_in)
from t2t_repro.bench.peak_memory import run_in_own_process
from t2t_repro.bench.pipeline import DEFAULT_DATA_ROOT
from t2t_repro.cli.one_line_parser import OneLineErrorParser

BATCH_SIZE = 32
BEAM_SIZE = 4
ALPHA = 0.6
GOAL_SPEEDUP = 5
WEIGHTS = "model.weights.h5"  # in the work folder, for every contender's process


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
    """A decoding run's figures: output tokens, seconds and the best outputs."""
    tokens: int
    seconds: float
    outputs: list


def timed_decode(search, batches):
    """`TimedDecode` of decoding `batches`, after an untimed decode of one batch of each shape
    the search compiles (rows, and source and output lengths as padded)."""
    from t2t_repro.decoding.transformer_search import padded_length

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
    return TimedDecode(sum(map(len, outputs)), seconds, outputs)


def ctranslate2_decode(ct2_dir, tokens, batches):
    """`TimedDecode` (best outputs as ids) of CTranslate2 decoding `batches` with beam
    BEAM_SIZE, each forced to its length as ours is, on every core, after one untimed batch."""
    import ctranslate2

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
    return TimedDecode(sum(map(len, outputs)), seconds, outputs)


class Contender(NamedTuple):
    """One decoding setup: our beam search (`engine` "t2t_repro") with the model in
    `precision` (float32, bfloat16, int8), or CTranslate2 with its `precision` (float32,
    int8) conversion of the same weights."""
    engine: str
    precision: str = "float32"
    use_cache: bool = True
    loop: str = "graph"
    jit_compile: bool = False


def decode_in_own_process(contender, work, batches):
    """`(TimedDecode, peak resident bytes)` of `contender` decoding `batches`, in a process of
    its own that reads what `write_models` left in `work`."""
    return run_in_own_process(_decode, contender, work, batches)


def _decode(contender, work, batches):
    if contender.engine == "ctranslate2":
        with open(os.path.join(work, "target_tokens.txt"), encoding="utf-8") as f:
            tokens = f.read().split("\n")
        return ctranslate2_decode(os.path.join(work, f"ct2_{contender.precision}"), tokens,
                                  batches)
    from t2t_repro.cli import quiet_tensorflow

    quiet_tensorflow.import_tensorflow()  # a fresh process: before anything imports it
    from t2t_repro.decoding.precision import model_in_precision
    from t2t_repro.decoding.transformer_search import TransformerBeamSearch

    model = _model(shared_vocabulary_problem_in(work))
    model.load_weights(os.path.join(work, WEIGHTS))
    search = TransformerBeamSearch(
        model_in_precision(model, contender.precision), BEAM_SIZE, ALPHA,
        use_cache=contender.use_cache, force_max_length=True,
        jit_compile=contender.jit_compile, loop=contender.loop)
    return timed_decode(search, batches)


def _model(problem):
    from t2t_repro.hparams import create_hparams
    from t2t_repro.training.run import build_model

    return build_model("transformer", create_hparams("transformer_base"), problem)


def write_models(problem, work, with_peer):
    """transformer_base with random weights for `problem`, saved in `work` for every
    contender's process, with its CTranslate2 float32 and int8 conversions when `with_peer`
    and the target vocabulary's tokens they are decoded with."""
    model = _model(problem)
    model.save_weights(os.path.join(work, WEIGHTS))
    if not with_peer:
        return
    from t2t_repro.serving.ctranslate2_model import vocabulary_tokens, write_ctranslate2_model

    for quantization in ("float32", "int8"):
        write_ctranslate2_model(model, problem, os.path.join(work, f"ct2_{quantization}"),
                                quantization)
    with open(os.path.join(work, "target_tokens.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(vocabulary_tokens(problem, "target")))


def main(argv):
    parser = OneLineErrorParser(prog="python -m t2t_repro.bench decode",
                                description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_root", default=DEFAULT_DATA_ROOT,
                        help="the shared data folder holding multi30k_ende/ and wmt14_ende/")
    parser.add_argument("--sentences", type=positive_int, default=500,
                        help="how many newstest2014 lines to decode (protocol: 500)")
    parser.add_argument("--uncached_every", type=non_negative_int, default=4,
                        help="time the uncached decoder on every n-th batch (1: all batches; "
                             "0: neither it nor the host loop)")
    parser.add_argument("--skip_peer", action="store_true", help="do not run CTranslate2")
    parser.add_argument("--precisions", default="bfloat16,int8",
                        type=comma_list(one_of("bfloat16", "int8"), may_be_empty=True),
                        help="also decode with copies of the model in these precisions "
                             "(bfloat16, int8; empty: none)")
    args = parser.parse_args(argv)

    peers = "skipped (--skip_peer)" if args.skip_peer else None
    if not args.skip_peer and importlib.util.find_spec("ctranslate2") is None:
        peers = "CTranslate2 is not installed: pip install -e '.[bench]'"
    with tempfile.TemporaryDirectory() as work:
        problem = shared_vocabulary_problem(args.data_root, work)
        sentences = newstest2014(args.data_root, "en", args.sentences)
        batches = forced_batches([problem.encode(sentence) for sentence in sentences])
        write_models(problem, work, with_peer=peers is None)

        def measure(contender, sample=batches):
            return decode_in_own_process(contender, work, sample)

        cached = measure(Contender("t2t_repro"))
        cached_xla = measure(Contender("t2t_repro", jit_compile=True))
        in_precision = {precision: measure(Contender("t2t_repro", precision))
                        for precision in args.precisions}
        if peers is None:
            peers = {quantization: measure(Contender("ctranslate2", quantization))
                     for quantization in ("float32", "int8")}
        if args.uncached_every:
            sample = batches[:: args.uncached_every]
            cached_host_loop = measure(Contender("t2t_repro", loop="host"))
            cached_sample = measure(Contender("t2t_repro"), sample)
            uncached_sample = measure(Contender("t2t_repro", use_cache=False, loop="host"),
                                      sample)
    ours = {"t2t_repro, as the decoder runs it": cached, "t2t_repro with XLA": cached_xla}
    rows = comparison_rows(ours, in_precision, peers)
    if args.uncached_every:
        rows += [
            _row("t2t_repro, host loop", cached_host_loop, "graph loop", cached),
            _row(f"cached vs uncached, {len(sample)} batches", cached_sample,
                 "uncached (full prefix)", uncached_sample),
        ]
    from t2t_repro.bench.report import format_table

    title = (f"Beam-search decoding, transformer_base sizes (random weights, the same in every "
             f"row), vocab {problem.target_vocab_size}: first {len(sentences)} newstest2014 "
             f"sentences, batches of {BATCH_SIZE}, beam {BEAM_SIZE}, forced length "
             f"round(1.1 x longest source) = {cached[0].tokens:,} tokens in {len(batches)} "
             f"batches; each row in a process of its own (peak memory: that process's peak "
             f"resident size)")
    print(format_table(rows, title))
    print(agreement(cached, in_precision, peers))
    if args.uncached_every:
        speedup = _rate(cached_sample) / _rate(uncached_sample)
        verdict = "met" if speedup >= GOAL_SPEEDUP else "MISSED"
        print(f"goal: cached >= {GOAL_SPEEDUP}x uncached: {verdict} ({speedup:.1f}x on the same "
              f"{sum(len(s) for s, _ in sample)} sentences)")


def _rate(measured):
    timed, _ = measured
    return timed.tokens / timed.seconds


def _row(name, measured, peer_name="", peer=None):
    """A table row of `(TimedDecode, peak bytes)` figures beside a peer's (or none)."""
    return (name, _rate(measured), "tok/s", peer_name, _rate(peer) if peer else None,
            measured[1], peer[1] if peer else None)


def comparison_rows(ours, in_precision, peers):
    """Our float32 rows beside CTranslate2 float32 (and XLA beside its int8), each precision's
    copy beside CTranslate2 of the same width, or alone when `peers` is a reason string."""
    if not isinstance(peers, dict):
        alone = {**ours, **{f"t2t_repro {precision}": measured
                            for precision, measured in in_precision.items()}}
        return [_row(name, measured) for name, measured in alone.items()]
    rows = [_row(name, measured, "CTranslate2 float32", peers["float32"])
            for name, measured in ours.items()]
    rows.append(_row("t2t_repro with XLA", ours["t2t_repro with XLA"], "CTranslate2 int8",
                     peers["int8"]))
    for precision, measured in in_precision.items():
        peer = "int8" if precision == "int8" else "float32"
        rows.append(_row(f"t2t_repro {precision}", measured, f"CTranslate2 {peer}",
                         peers[peer]))
    return rows


def agreement(cached, in_precision, peers):
    """Lines saying on how many sentences the best hypotheses agree: ours and CTranslate2's in
    float32, and each precision's copy and our float32."""
    outputs = cached[0].outputs
    if not isinstance(peers, dict):
        return f"peer: {peers}"
    same = sum(a == b for a, b in zip(outputs, peers["float32"][0].outputs))
    lines = [f"best hypotheses identical to CTranslate2 float32's on {same} of {len(outputs)} "
             f"sentences (equal forced lengths: the ranking is log P alone)"]
    for precision, (timed, _) in in_precision.items():
        same = sum(a == b for a, b in zip(timed.outputs, outputs))
        lines.append(f"t2t_repro {precision}: best hypotheses identical to our float32's on "
                     f"{same} of {len(outputs)} sentences")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
