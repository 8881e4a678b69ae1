"""Search quality on a trained run: BLEU, output length and search errors of beam search
beside greedy search, for several beam sizes and length penalties (`bench search`).

    python -m t2t_repro.bench search --output_dir=runs/m30k \\
        [--checkpoint_path=runs/m30k/averaged] --source_file=test.en --reference_file=test.de \\
        [--beam_sizes 1,4,8] [--alphas 0.6,1.0,1.4] [--extra_length 50] [--batch_size 32]
        [--precision float32|bfloat16|int8]

The run is read as the decoder reads it (its flags.txt's problem and data folder, its
hparams.json); decoding and scoring are in float32, or in `--precision` (`decoding.precision`).
Every search's best hypothesis and the greedy one (beam 1) are scored by the same model,
teacher-forced on the searches' own pieces (`decoding.scoring.Scorer`), under beam search's
objective log P / lp(n), lp(n) = ((5 + n) / 6)^α, n the pieces with EOS (GNMT's, as
tensor2tensor's). A beam search whose best scores below the greedy hypothesis under that
objective made a search error: its beams held a worse hypothesis than one greedy search found.
A greedy hypothesis cut at the maximum length (no EOS) reveals none: beam search returns a
finished hypothesis before any cut one. Each row: sacreBLEU, its brevity penalty, the length
ratio (output over reference words, sacreBLEU's), the mean output pieces and the search errors;
the header says how far each search's own scores are from the rescoring.
"""

import os

import numpy as np

from t2t_repro.bench.arguments import comma_list, non_negative_float, positive_int
from t2t_repro.cli.one_line_parser import OneLineErrorParser
from t2t_repro.decoding.beam_search import length_penalty
from t2t_repro.decoding.precision import PRECISIONS, model_in_precision
from t2t_repro.errors import ConfigurationError
from t2t_repro.names import EOS_ID

# Objectives within this of each other are ties (float32 sums over a sentence's pieces).
TIE_TOLERANCE = 1e-4


def load_run(output_dir, checkpoint_path=None):
    """`(problem, model)` of a trained run, as the decoder finds them (flags.txt's problem,
    data folder and model; hparams.json; the newest checkpoint, or `checkpoint_path`)."""
    from t2t_repro import hparams as hparams_lib
    from t2t_repro.training.checkpoints import named_checkpoint
    from t2t_repro.training.run import load_trained_model
    from t2t_repro.training.run_records import recorded_flags, recorded_problem

    recorded = recorded_flags(output_dir)
    problem = recorded_problem(output_dir)
    checkpoint = named_checkpoint(checkpoint_path or output_dir)
    model = load_trained_model(recorded.get("model", "transformer"),
                               hparams_lib.load(output_dir), problem, checkpoint)
    return problem, model


def best_hypotheses(problem, model, source_ids, beam_size, alpha, extra_length, batch_size):
    """Each source's best hypothesis `(ids up to and with EOS, the search's own score)`."""
    from t2t_repro.decoding.text_decoding import (
        create_decode_hparams, create_search, decode_id_lists)

    decode_hparams = create_decode_hparams(
        problem, f"beam_size={beam_size},alpha={alpha},extra_length={extra_length}")
    outputs = decode_id_lists(create_search(model, decode_hparams), source_ids, batch_size)
    return [(_trimmed(ids[0]), float(scores[0])) for ids, scores in outputs]


def _trimmed(ids):
    """A hypothesis's ids without the padding after it."""
    ids = [int(i) for i in ids]
    while ids and ids[-1] == 0:
        ids.pop()
    return ids


def teacher_forced(scorer, source_ids, hypotheses, batch_size):
    """`(log P, pieces)` of each (source, hypothesis ids) under the model, teacher-forced."""
    from t2t_repro.decoding.scoring import score_id_pairs

    return score_id_pairs(scorer, list(zip(source_ids, hypotheses)), batch_size)


def objectives(scored, alpha):
    """log P / lp(n) of each `(log P, pieces)` of `teacher_forced`."""
    return np.array([score / float(length_penalty(length, alpha)) for score, length in scored])


def search_error_count(beam_objectives, greedy_objectives):
    """How many sentences' beam-search best scores below their greedy hypothesis."""
    return int(np.sum(beam_objectives < greedy_objectives - TIE_TOLERANCE))


def main(argv):
    parser = OneLineErrorParser(prog="python -m t2t_repro.bench search",
                                description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", required=True, help="a trained run")
    parser.add_argument("--checkpoint_path", default=None,
                        help="a checkpoint file or folder (default: the run's newest)")
    parser.add_argument("--source_file", required=True)
    parser.add_argument("--reference_file", required=True)
    parser.add_argument("--beam_sizes", type=comma_list(positive_int), default=[1, 4, 8])
    parser.add_argument("--alphas", type=comma_list(non_negative_float), default=[0.6, 1.0, 1.4])
    parser.add_argument("--extra_length", type=int, default=50)
    parser.add_argument("--batch_size", type=positive_int, default=32)
    parser.add_argument("--precision", default="float32", choices=PRECISIONS,
                        help="decode and score a copy of the model computing in this precision")
    args = parser.parse_args(argv)

    from t2t_repro.decoding.file_decoding import encode_lines
    from t2t_repro.decoding.scoring import Scorer
    from t2t_repro.metrics.bleu import sacre_bleu
    from t2t_repro.utils.text_lines import read_aligned_lines

    if not os.path.isdir(args.output_dir):
        raise ConfigurationError(f"--output_dir={args.output_dir} does not exist; name a "
                                 f"trained run.")
    sources, references = read_aligned_lines(args.source_file, "--source_file",
                                             args.reference_file, "--reference_file")
    problem, model = load_run(args.output_dir, args.checkpoint_path)
    model = model_in_precision(model, args.precision)
    source_ids = encode_lines(problem, sources, args.source_file)
    # sacreBLEU's tokenizer follows a translation problem's target language; 13a for others.
    language = getattr(problem, "target_language", "")
    problem.check_decode_metrics()  # before the searches, whose BLEU it is
    scorer = Scorer(model)
    beam_sizes, alphas = args.beam_sizes, args.alphas
    greedy = [ids for ids, _ in best_hypotheses(problem, model, source_ids, 1, 0.0,
                                                args.extra_length, args.batch_size)]
    greedy_finished = np.array([bool(ids) and ids[-1] == EOS_ID for ids in greedy])
    greedy_scored = teacher_forced(scorer, source_ids, greedy, args.batch_size)
    rows, largest_gap = [], 0.0
    for beam_size in beam_sizes:
        for alpha in alphas if beam_size > 1 else [None]:
            if beam_size == 1:
                hypotheses, errors, scored = greedy, None, None
            else:
                best = best_hypotheses(problem, model, source_ids, beam_size, alpha,
                                       args.extra_length, args.batch_size)
                hypotheses = [ids for ids, _ in best]
                scored = objectives(teacher_forced(scorer, source_ids, hypotheses,
                                                   args.batch_size), alpha)
                largest_gap = max(largest_gap, float(np.max(np.abs(
                    scored - np.array([score for _, score in best])))))
                errors = search_error_count(scored, np.where(
                    greedy_finished, objectives(greedy_scored, alpha), -np.inf))
            bleu = sacre_bleu([problem.decode(ids) for ids in hypotheses], references,
                              language)
            lengths = [len(ids) for ids in hypotheses]
            rows.append((beam_size, alpha, bleu.score, bleu.bp, bleu.sys_len / bleu.ref_len,
                         float(np.mean(lengths)), errors))
    print(_table(rows, len(sources), args, largest_gap, int(np.sum(~greedy_finished))))


def _table(rows, sentences, args, largest_gap, greedy_cut):
    checkpoint = args.checkpoint_path or args.output_dir
    lines = [f"Search quality of {checkpoint} ({args.precision}) on "
             f"{os.path.basename(args.source_file)} ({sentences} sentences, extra_length "
             f"{args.extra_length}). Search errors: "
             f"sentences whose beam-search best scores below the greedy hypothesis under "
             f"log P / lp at the row's alpha ({greedy_cut} greedy hypotheses cut at the "
             f"maximum length left out). The searches' own scores are within "
             f"{largest_gap:.1e} of the teacher-forced rescoring.",
             "beam  alpha  sacreBLEU  BP     length ratio  mean pieces  search errors"]
    for beam_size, alpha, bleu, bp, ratio, pieces, errors in rows:
        lines.append(f"{beam_size:<4}  {'-' if alpha is None else f'{alpha:.1f}':<5}  "
                     f"{bleu:<9.2f}  {bp:.3f}  {ratio:<12.3f}  {pieces:<11.2f}  "
                     f"{'-' if errors is None else errors}")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
