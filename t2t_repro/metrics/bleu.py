"""BLEU two ways: sacreBLEU on detokenized text, and the paper's tokenized BLEU.

sacreBLEU (Post 2018) tokenizes the text itself and names its settings in a signature, so its
figures compare across papers. The paper's 28.4 (en-de) was computed as tensor2tensor's
`get_ende_bleu.sh` did in 2017: Moses `tokenizer.perl -l de` on both sides, hyphenated compounds
split into `##AT##-##AT##` tokens, then `multi-bleu.perl`. That figure usually runs higher than
sacreBLEU's on the same output and is comparable only with figures computed the same way.

The compound split is a German convention (get_ende_bleu.sh is for German targets). For other
target languages the tokenized BLEU here is `tokenizer.perl -l <language>` and multi-bleu.perl
without the split, reported as `bleu_tokenized` rather than `bleu_tokenized_compound_split`.
"""

import collections
import math
import re

import sacrebleu
from sacrebleu.metrics.bleu import BLEUScore

from t2t_repro.errors import ConfigurationError
from t2t_repro.metrics.moses_tokenizer import moses_tokenize

__all__ = ["LANGUAGE_CODE_RULE", "bleu_report", "check_language_code", "compound_split_bleu",
           "is_language_code", "moses_tokenize", "multi_bleu", "multi_bleu_line", "sacre_bleu",
           "sacre_bleu_signature", "split_compounds", "tokenized_bleu", "tokenized_bleu_name"]

# sacreBLEU picks its tokenizer, tokenizer.perl its rules and the compound split its language
# by exact, lower-case codes: "ZH" or "zh-CN" would be scored as any other language.
LANGUAGE_CODE_RULE = ("a language's ISO 639 code in lower case, e.g. de (zh, not ZH or zh-CN), "
                      "which BLEU's tokenizers follow")

# get_ende_bleu.sh's `perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g'` runs over bytes: \S is any
# byte but ASCII whitespace, so one byte of a UTF-8 letter is enough on either side. Like Perl's
# /g, re.sub resumes after each match: the `b` taken by `a-b` cannot start `b-c` in `a-b-c`, but
# in `ä-ö-ü` the match ends inside `ö` and its second byte starts the next one.
_COMPOUND_HYPHEN = re.compile(rb"(\S)-(\S)")
_COMPOUND_SPLIT = rb"\1 ##AT##-##AT## \2"
# multi-bleu.perl reads bytes and splits on ASCII whitespace only (a no-break space is a token).
_PERL_BYTE_SPACES = re.compile(r"[ \t\n\x0b\f\r]+")
_MAX_ORDER = 4


def is_language_code(value):
    """Whether `value` is a code as `LANGUAGE_CODE_RULE` asks: two or three lower-case letters."""
    return re.fullmatch("[a-z]{2,3}", value) is not None


def check_language_code(value, name):
    """ConfigurationError naming `name` (a flag) unless `value` is a language code."""
    if not is_language_code(value):
        raise ConfigurationError(f"{name}={value!r} must be {LANGUAGE_CODE_RULE}.")


def _check_lines(hypotheses, references):
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references; BLEU "
                         f"needs exactly one reference line per hypothesis line.")
    if not hypotheses:
        raise ValueError("No hypotheses and no references: there is nothing to score.")


def sacre_bleu(hypotheses, references, language=""):
    """Corpus BLEU of detokenized `hypotheses` against one reference line each, with sacreBLEU's
    defaults for a `language` target, as `sacrebleu -l <source>-<language>` scores: mixed case,
    exp smoothing, and the tokenizer sacreBLEU picks for the language (zh for Chinese, ja-mecab
    and ko-mecab for Japanese and Korean, 13a for the others): the figure comparable across
    papers."""
    _check_lines(hypotheses, references)
    return _sacre_bleu_metric(language).corpus_score(list(hypotheses), [list(references)])


def sacre_bleu_signature(language=""):
    """The sacreBLEU signature of `sacre_bleu`'s scores for a `language` target, e.g.
    `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`."""
    # sacreBLEU reads the reference count, part of the signature, off the references it is given.
    return str(_sacre_bleu_metric(language, references=[[""]]).get_signature())


def _sacre_bleu_metric(language, **options):
    try:
        return sacrebleu.BLEU(trg_lang=language, **options)
    except RuntimeError:  # sacreBLEU's Japanese and Korean tokenizers are extras
        raise ConfigurationError(
            f"sacreBLEU tokenizes {language} text with a package of its extras, not installed "
            f"here: pip install 'sacrebleu[{language}]'.") from None


def split_compounds(tokenized_line):
    """Splits hyphenated compounds as get_ende_bleu.sh does (`Wort-Spiel` ->
    `Wort ##AT##-##AT## Spiel`), so a compound earns credit for its parts."""
    split = _COMPOUND_HYPHEN.sub(_COMPOUND_SPLIT, tokenized_line.encode("utf-8"))
    # The split goes in at a hyphen, an ASCII byte, so it never cuts a UTF-8 character.
    return split.decode("utf-8")


def _perl_words(line):
    return [word for word in _PERL_BYTE_SPACES.split(line) if word]


def _ngrams(words, order):
    return collections.Counter(tuple(words[i:i + order]) for i in range(len(words) - order + 1))


def multi_bleu(tokenized_hypotheses, tokenized_references):
    """multi-bleu.perl's corpus BLEU of tokenized lines, one reference each: case-sensitive
    tokens split on ASCII whitespace, clipped n-gram matches up to 4-grams, no smoothing (an order
    without matches makes BLEU 0), brevity penalty from the summed reference lengths.

    Where multi-bleu.perl stops (no hypothesis tokens at all: a division by zero) this scores 0.
    """
    _check_lines(tokenized_hypotheses, tokenized_references)
    correct, total = [0] * _MAX_ORDER, [0] * _MAX_ORDER
    sys_len = ref_len = 0
    for hypothesis, reference in zip(tokenized_hypotheses, tokenized_references):
        hypothesis_words, reference_words = _perl_words(hypothesis), _perl_words(reference)
        sys_len += len(hypothesis_words)
        ref_len += len(reference_words)
        for n in range(1, _MAX_ORDER + 1):
            hypothesis_ngrams = _ngrams(hypothesis_words, n)
            reference_ngrams = _ngrams(reference_words, n)
            total[n - 1] += sum(hypothesis_ngrams.values())
            correct[n - 1] += sum((hypothesis_ngrams & reference_ngrams).values())
    precisions = [c / t if t else 0.0 for c, t in zip(correct, total)]
    if ref_len == 0 or sys_len == 0:
        bp = 0.0
    else:
        bp = 1.0 if sys_len >= ref_len else math.exp(1 - ref_len / sys_len)
    if all(precisions):
        score = 100 * bp * math.exp(sum(math.log(p) for p in precisions) / _MAX_ORDER)
    else:
        score = 0.0
    return BLEUScore(score, correct, total, [100 * p for p in precisions], bp, sys_len, ref_len)


def multi_bleu_line(score):
    """`score` as multi-bleu.perl prints it: `BLEU = 28.46, 59.9/34.1/21.9/14.6 (BP=1.000,
    ratio=1.038, hyp_len=64495, ref_len=62141)`."""
    if score.ref_len == 0:
        return "BLEU = 0, 0/0/0/0 (BP=0, ratio=0, hyp_len=0, ref_len=0)"
    precisions = "/".join(f"{p:.1f}" for p in score.precisions)
    return (f"BLEU = {score.score:.2f}, {precisions} (BP={score.bp:.3f}, "
            f"ratio={score.sys_len / score.ref_len:.3f}, hyp_len={score.sys_len}, "
            f"ref_len={score.ref_len})")


def _tokenized_bleu(hypotheses, references, language, split):
    _check_lines(hypotheses, references)

    def prepare(lines):
        tokenized = (moses_tokenize(line, language) for line in lines)
        return [split_compounds(line) if split else line for line in tokenized]

    return multi_bleu(prepare(hypotheses), prepare(references))


def compound_split_bleu(hypotheses, references, language="de"):
    """get_ende_bleu.sh's BLEU, the paper's: both sides through `tokenizer.perl -l <language>`
    and the compound split, then multi-bleu.perl. Not comparable to sacreBLEU."""
    return _tokenized_bleu(hypotheses, references, language, split=True)


def tokenized_bleu(hypotheses, references, language):
    """The tokenized BLEU for a `language` target: `compound_split_bleu` for German, for other
    languages the same without the German compound split."""
    return _tokenized_bleu(hypotheses, references, language, split=language == "de")


def tokenized_bleu_name(language):
    """The metric name of `tokenized_bleu` for a `language` target."""
    return "bleu_tokenized_compound_split" if language == "de" else "bleu_tokenized"


def bleu_report(hypotheses, references, language="de"):
    """Printable lines: sacreBLEU with its signature, then the tokenized BLEU of a `language`
    target as multi-bleu.perl prints it, labelled so that the two are not confused."""
    sacre = sacre_bleu(hypotheses, references, language)
    tokenized = tokenized_bleu(hypotheses, references, language)
    compound_split = " + compound split" if language == "de" else ""
    steps = f"Moses tokenizer.perl -l {language}{compound_split}"
    return [
        f"sacreBLEU (detokenized text): "
        f"{sacre.format(signature=sacre_bleu_signature(language))}",
        f"tokenized BLEU ({steps}, multi-bleu.perl; the paper's measure, not comparable to "
        f"sacreBLEU): {multi_bleu_line(tokenized)}",
    ]
