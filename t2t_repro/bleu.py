"""Scores a translation file against a reference file: sacreBLEU and the paper's tokenized BLEU.

    python -m t2t_repro.bleu --translation=newstest2014.decoded.de --reference=newstest2014.de
    python -m t2t_repro.bleu --translation=out.fr --reference=newstest2014.fr --language=fr

Both files hold detokenized text, one sentence per line. sacreBLEU (with its signature) is the
figure to compare with other work; the tokenized, compound-split BLEU is the paper's measure and
comparable only with figures computed the same way.
"""

from absl import flags

from t2t_repro.cli import entry_point
from t2t_repro.cli.entry_point import check_usage
from t2t_repro.errors import ConfigurationError
from t2t_repro.utils.text_lines import read_aligned_lines

FLAGS = flags.FLAGS

flags.DEFINE_string("translation", None, "The system's translations, detokenized, one per line.")
flags.DEFINE_string("reference", None, "The reference translations, detokenized, one per line.")
flags.DEFINE_string("language", "de",
                    "Target language, an ISO 639 code: -l of tokenizer.perl for the tokenized "
                    "BLEU, and picks sacreBLEU's tokenizer (zh: zh, ja: ja-mecab, ko: ko-mecab; "
                    "13a for the others).")


def main(argv):
    from t2t_repro.metrics import bleu

    check_usage(argv, ("translation", "reference"))
    bleu.check_language_code(FLAGS.language, "--language")
    translation, reference = read_aligned_lines(FLAGS.translation, "--translation",
                                                FLAGS.reference, "--reference")
    if not translation:
        raise ConfigurationError("both files are empty; there is nothing to score.")
    print("\n".join(bleu.bleu_report(translation, reference, FLAGS.language)))


if __name__ == "__main__":
    entry_point.run(main)
