"""Translates text with a running server, as tensor2tensor's `t2t-query-server` does.

    python -m t2t_repro.query --server=http://127.0.0.1:8501 --model_name=default \\
        [--inputs_file=F] [--signature_name=serving_default | --score] [--batch_size=16] \\
        [--timeout=300]

Reads the lines of --inputs_file, or of stdin (split as the decoder splits them), sends them
--batch_size at a time to `python -m t2t_repro.serve` (or TF Serving) and prints one
translation per line, in order; with --signature_name=beams, every beam and its score,
tab-separated, as the decoder's `return_beams` prints them. With --score each line is
`source<TAB>target`, sent to the export's `score` signature, and printed is the target's
log-probability given the source (nats, EOS included) and its pieces, tab-separated, as the
decoder's --score_file writes them. Typed at a terminal, each line is
sent as it is entered. A server error stops the run with a non-zero status (at a terminal it is
reported and the session goes on); a batch the server runs out of memory on (a 429) is sent
again line by line; when the server rejects a line (a 400, or a 429 for the line alone), or a
--score line has not exactly one tab, the translations of the lines before it are printed and
the error names its line. Needs no TensorFlow.
"""

import itertools
import sys

from absl import flags

from t2t_repro.cli import entry_point, run_flags  # noqa: F401 (run_flags: --model_name)
from t2t_repro.cli.entry_point import FlagAlias, apply_flag_aliases, check_usage
from t2t_repro.errors import ConfigurationError
from t2t_repro.names import SCORE_SIGNATURE
from t2t_repro.serving.client import (BEST_SIGNATURE, QueryError, answers_in_batches,
                                      check_server, predict, score)
from t2t_repro.utils.text_lines import (TextLinesError, beams_line, iter_lines, open_flagged,
                                        output_field, score_line, source_target_pair)

FLAGS = flags.FLAGS

flags.DEFINE_string("server", "http://127.0.0.1:8501", "The server's address.")
flags.DEFINE_string("inputs_file", None, "Text to translate, one sentence per line; without "
                    "it, lines are read from stdin.")
flags.DEFINE_string("signature_name", BEST_SIGNATURE,
                    "serving_default (the best translation) or beams (every beam, scored).")
flags.DEFINE_bool("score", False, "Score given translations: lines source<TAB>target, sent to "
                  "the score signature; prints each target's log-probability and pieces.")
flags.DEFINE_integer("batch_size", 16, "Lines sent in one request.", lower_bound=1)
flags.DEFINE_float("timeout", 300.0, "Seconds to wait for the server's answer to one request.",
                   lower_bound=0.001)
flags.DEFINE_string("servable_name", None, "tensor2tensor's name for --model_name.")
flags.DEFINE_float("timeout_secs", None, "tensor2tensor's name for --timeout.")

ALIASES = (FlagAlias("servable_name", "model_name"), FlagAlias("timeout_secs", "timeout"))


def answer_line(answer):
    """The line printed for one of the server's answers: the translation, or for every beam
    its text and score, tab-separated (the decoder's `decode_output_line` with and without
    `return_beams`)."""
    return output_field(answer[0]) if isinstance(answer, tuple) else beams_line(answer)


def output_lines(texts):
    """One request of `texts` and the lines printed for its answers: translations, or with
    --score the scores of the pairs they are (a ValueError for a line that is not one)."""
    if FLAGS.score:
        pairs = [source_target_pair(text) for text in texts]
        return [score_line(*answer) for answer in score(FLAGS.server, FLAGS.model_name, pairs,
                                                          FLAGS.timeout)]
    return [answer_line(answer) for answer in predict(FLAGS.server, FLAGS.model_name, texts,
                                                      FLAGS.signature_name, FLAGS.timeout)]


def translate(numbered_lines, batch_size, label):
    """Prints the translations of `numbered_lines` ((line number, text) pairs of the stream
    `label`) a batch at a time as they come; the first error ends the run, naming its line
    (`client.answers_in_batches`)."""
    for lines in answers_in_batches(output_lines, numbered_lines, batch_size, label):
        print("\n".join(lines), flush=True)


def translate_interactively():
    """Sends each line typed as it is entered; an error is reported and the session goes on."""
    print("Type a sentence and press Enter (Ctrl-D to end).", file=sys.stderr)
    for number in itertools.count(1):
        print("> ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.buffer.readline()
        if not line:
            return
        try:
            translate(enumerate(iter_lines([line], "stdin"), number), 1, "stdin")
        except (QueryError, TextLinesError) as error:
            print(f"error: {error}", file=sys.stderr, flush=True)


def main(argv):
    check_usage(argv)
    apply_flag_aliases(ALIASES)
    if FLAGS.score and FLAGS["signature_name"].present:
        raise ConfigurationError("--score sends every line to the score signature; give no "
                                 "--signature_name with it.")
    if FLAGS.signature_name == SCORE_SIGNATURE and not FLAGS.score:
        raise ConfigurationError(f"--signature_name={SCORE_SIGNATURE} takes lines "
                                 f"source<TAB>target; give --score instead, which sends them.")
    check_server(FLAGS.server)
    if FLAGS.inputs_file:
        with open_flagged(FLAGS.inputs_file, "--inputs_file") as binary:
            translate(enumerate(iter_lines(binary, FLAGS.inputs_file), 1), FLAGS.batch_size,
                      FLAGS.inputs_file)
    elif sys.stdin.isatty():
        translate_interactively()
    else:
        translate(enumerate(iter_lines(sys.stdin.buffer, "stdin"), 1), FLAGS.batch_size,
                  "stdin")


if __name__ == "__main__":
    entry_point.run(main, ("model_name",))
