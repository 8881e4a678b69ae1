"""BLEU two ways: sacreBLEU on detokenized text, and the paper's tokenized, compound-split BLEU.

sacreBLEU (Post 2018) tokenizes the text itself and names its settings in a signature, so its
figures compare across papers. The paper's 28.4 (en-de) was computed as tensor2tensor's
`get_ende_bleu.sh` does: Moses `tokenizer.perl` on both sides, hyphenated compounds split into
`##AT##-##AT##` tokens, then `multi-bleu.perl`. That figure usually runs higher than sacreBLEU's
on the same output and is comparable only with figures computed the same way.
"""

import functools
import re

import sacrebleu
from sacremoses import MosesTokenizer

# get_ende_bleu.sh's `perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g'`. Perl reads bytes there, so
# \S is anything but ASCII whitespace (re.ASCII). Like Perl's /g, re.sub resumes after each match,
# so a one-character part between hyphens is used up: `a-b-c` -> `a ##AT##-##AT## b-c`.
_COMPOUND_HYPHEN = re.compile(r"(\S)-(\S)", re.ASCII)
_COMPOUND_SPLIT = r"\1 ##AT##-##AT## \2"


def _check_lines(hypotheses, references):
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references; BLEU "
                         f"needs exactly one reference line per hypothesis line.")
    if not hypotheses:
        raise ValueError("No hypotheses and no references: there is nothing to score.")


def sacre_bleu(hypotheses, references):
    """Corpus BLEU of detokenized `hypotheses` against one reference line each, with sacreBLEU's
    defaults (13a tokenizer, mixed case, exp smoothing): the figure comparable across papers."""
    _check_lines(hypotheses, references)
    return sacrebleu.BLEU().corpus_score(list(hypotheses), [list(references)])


def sacre_bleu_signature():
    """The sacreBLEU signature of `sacre_bleu`'s scores, e.g.
    `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`."""
    # sacreBLEU reads the reference count, part of the signature, off the references it is given.
    return str(sacrebleu.BLEU(references=[[""]]).get_signature())


@functools.lru_cache(maxsize=None)
def _moses_tokenizer(language):
    return MosesTokenizer(lang=language)


def moses_tokenize(line, language="de"):
    """`line` as `tokenizer.perl -l <language>` writes it with its defaults: punctuation split off,
    hyphens kept (no -a), XML characters escaped (`"` -> `&quot;`, `'` -> `&apos;`).

    This is tokenizer.perl as the paper's tooling ran it, in 2017: mosesdecoder PR #204 (Nov 2018)
    later split a sentence-final period off a nonbreaking prefix (`iPhone 5.` -> `iPhone 5 .`);
    sacremoses keeps the earlier behaviour.
    """
    return _moses_tokenizer(language).tokenize(line, return_str=True, escape=True)


def split_compounds(tokenized_line):
    """Splits hyphenated compounds as get_ende_bleu.sh does (`Wort-Spiel` ->
    `Wort ##AT##-##AT## Spiel`), so a compound earns credit for its parts."""
    return _COMPOUND_HYPHEN.sub(_COMPOUND_SPLIT, tokenized_line)


def compound_split_bleu(hypotheses, references, language="de"):
    """The paper's tokenized BLEU: both sides Moses-tokenized and compound-split, then scored as
    multi-bleu.perl scores (whitespace tokens, case-sensitive, no smoothing). Not comparable to
    sacreBLEU."""
    _check_lines(hypotheses, references)

    def prepare(lines):
        return [split_compounds(moses_tokenize(line, language)) for line in lines]

    # multi-bleu.perl has no smoothing: an n-gram order without matches makes BLEU 0.
    metric = sacrebleu.BLEU(tokenize="none", smooth_method="none", force=True)
    return metric.corpus_score(prepare(hypotheses), [prepare(references)])


def bleu_report(hypotheses, references, language="de"):
    """Printable lines: sacreBLEU with its signature, then the paper's tokenized, compound-split
    BLEU, labelled so that the two are not confused."""
    sacre = sacre_bleu(hypotheses, references)
    tokenized = compound_split_bleu(hypotheses, references, language)
    return [
        f"sacreBLEU (detokenized text): {sacre.format(signature=sacre_bleu_signature())}",
        f"tokenized BLEU (Moses tokenizer.perl -l {language} + compound split, multi-bleu.perl; "
        f"the paper's measure, not comparable to sacreBLEU): {tokenized.format()}",
    ]
