"""Translates (decodes) text with a trained model: a file, or lines typed on stdin.

    python -m t2t_repro.decoder --problem=translate_ende --data_dir=D --output_dir=O \\
        --decode_hparams="beam_size=4,alpha=0.6,extra_length=50" \\
        --decode_from_file=newstest2014.en --decode_to_file=out.de \\
        --decode_reference=newstest2014.de

The hparams are those saved in --output_dir (or --hparams_set/--hparams, checked against
them); the weights are the latest checkpoint there, or --checkpoint_path (a checkpoint file,
or a directory such as avg_checkpoints' output). With --decode_reference it prints the
problem's scores: sacreBLEU and the paper's tokenized BLEU for translation.
"""

import sys
import time

from t2t_repro import quiet_tensorflow

quiet_tensorflow.import_tensorflow()  # before anything imports it: see the module

from absl import flags  # noqa: E402

from t2t_repro import command_line, problem_flags, trained_model_flags  # noqa: E402
from t2t_repro.atomic_files import write_text_atomically  # noqa: E402
from t2t_repro.beam_lines import beams_line  # noqa: E402
from t2t_repro.errors import ConfigurationError  # noqa: E402
from t2t_repro.text_lines import iter_lines, read_lines  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_string("decode_from_file", None,
                    "Source text, one sentence per line; without it, lines are read from stdin.")
flags.DEFINE_string("decode_to_file", None,
                    "Where the decodes go, one per line (default: stdout).")
flags.DEFINE_string("decode_reference", None,
                    "Reference text aligned with --decode_from_file: print the problem's scores.")


class ProgressPrinter:
    """`(done, total)` progress lines on stderr: sentences and sentences per second."""

    def __init__(self):
        self.start = time.monotonic()

    def __call__(self, done, total):
        elapsed = time.monotonic() - self.start
        print(f"decoded {done}/{total} sentences ({done / max(elapsed, 1e-9):.1f}/s, "
              f"{elapsed:.0f} s)", file=sys.stderr, flush=True)


# What tf.strings.strip removes: a line of only these is blank, here as in an exported model.
_ASCII_WHITESPACE = " \t\n\v\f\r"


def is_blank(text):
    """Whether `text` is empty or ASCII whitespace only. A blank line translates to an empty
    line with score 0, without decoding, as an exported model answers it."""
    return not text.strip(_ASCII_WHITESPACE)


def blank_beams(decode_hparams):
    return [("", 0.0)] * decode_hparams.beam_size


def decode_output_line(beams, return_beams):
    """The best hypothesis, or with `return_beams` every one and its score, tab-separated."""
    return beams_line(beams) if return_beams else beams[0][0]


def encode_lines(problem, lines, path):
    """`problem.encode` of every line, checked before any decoding: a line the problem cannot
    encode is a ConfigurationError naming `path`, its line number and what is accepted."""
    from t2t_repro.data.problem import UnencodableInputError

    id_lists, bad = [], []
    for line_number, line in enumerate(lines, 1):
        try:
            id_lists.append(problem.encode(line))
        except UnencodableInputError as error:
            bad.append((line_number, error))
    if bad:
        line_number, error = bad[0]
        others = f" (and {len(bad) - 1} more lines)" if len(bad) > 1 else ""
        raise ConfigurationError(f"{path} line {line_number}{others}: {error}")
    return id_lists


def check_source_lengths(model, id_lists, path):
    """Raises ConfigurationError naming `path` and the first line whose source does not fit
    the model (a learned position table of max_length rows), before any decoding."""
    for line_number, ids in enumerate(id_lists, 1):
        try:
            model.check_length(len(ids), "source")
        except ValueError as error:
            raise ConfigurationError(f"{path} line {line_number}: {error}") from None


def read_sources(problem):
    """--decode_from_file encoded, and --decode_reference's lines (or None), checked before
    the model is loaded."""
    sources = read_lines(FLAGS.decode_from_file)
    references = read_lines(FLAGS.decode_reference) if FLAGS.decode_reference else None
    if references is not None and len(references) != len(sources):
        raise ConfigurationError(
            f"--decode_reference has {len(references)} lines but --decode_from_file has "
            f"{len(sources)}; they must be aligned line by line."
        )
    return sources, encode_lines(problem, sources, FLAGS.decode_from_file), references


def decode_file(problem, search, decode_hparams, sources, id_lists, references):
    from t2t_repro.decoding.text_decoding import decode_encoded

    blank = [is_blank(source) for source in sources]
    decoded = iter(decode_encoded(problem, search,
                                  [ids for ids, skip in zip(id_lists, blank) if not skip],
                                  decode_hparams.batch_size, ProgressPrinter()))
    beams = [blank_beams(decode_hparams) if skip else next(decoded) for skip in blank]
    lines = [decode_output_line(hypotheses, decode_hparams.return_beams) for hypotheses in beams]
    if FLAGS.decode_to_file:
        write_text_atomically(FLAGS.decode_to_file, "".join(line + "\n" for line in lines))
        print(f"Wrote {len(lines)} decodes to {FLAGS.decode_to_file}.", file=sys.stderr)
    else:
        print("\n".join(lines))
    if references is not None:
        best = [hypotheses[0][0] for hypotheses in beams]
        print("\n".join(problem.decode_report(sources, best, references)))


def decode_interactively(problem, search, decode_hparams):
    """Decodes stdin line by line (lines split as files are); a line the problem cannot
    encode, or longer than the model takes, is reported on stderr and skipped."""
    from t2t_repro.data.problem import UnencodableInputError
    from t2t_repro.decoding.text_decoding import decode_encoded

    interactive = sys.stdin.isatty()
    if interactive:
        print("Type a sentence and press Enter (Ctrl-D to end).", file=sys.stderr)
    lines = enumerate(iter_lines(sys.stdin.buffer, "stdin"), 1)
    while True:
        if interactive:
            print("> ", end="", file=sys.stderr, flush=True)
        line_number, line = next(lines, (None, None))
        if line is None:
            return
        if is_blank(line):
            print(decode_output_line(blank_beams(decode_hparams), decode_hparams.return_beams),
                  flush=True)
            continue
        try:
            ids = problem.encode(line)
            search.model.check_length(len(ids), "source")
        except (UnencodableInputError, ValueError) as error:
            print(f"error: stdin line {line_number} skipped: {error}", file=sys.stderr, flush=True)
            continue
        beams = decode_encoded(problem, search, [ids], batch_size=1)[0]
        print(decode_output_line(beams, decode_hparams.return_beams), flush=True)


def run():
    from t2t_repro.decoding.text_decoding import create_decode_hparams, create_search

    problem = problem_flags.create_problem()
    problem.check_data()
    hparams = trained_model_flags.resolve_hparams()
    decode_hparams = create_decode_hparams(problem, FLAGS.decode_hparams)
    sources = read_sources(problem) if FLAGS.decode_from_file else None
    checkpoint, model = trained_model_flags.load_model(problem, hparams)
    if sources is not None:
        check_source_lengths(model, sources[1], FLAGS.decode_from_file)
    print(f"Decoding with {checkpoint}: beam_size={decode_hparams.beam_size}, "
          f"alpha={decode_hparams.alpha}, extra_length={decode_hparams.extra_length}.",
          file=sys.stderr)
    search = create_search(model, decode_hparams)
    if sources is not None:
        decode_file(problem, search, decode_hparams, *sources)
    else:
        decode_interactively(problem, search, decode_hparams)


def main(argv):
    trained_model_flags.start_trained_run_command(argv)
    run()


if __name__ == "__main__":
    command_line.run(main)
