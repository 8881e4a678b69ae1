"""BLEU: sacreBLEU against published WMT17 scores, and the paper's compound-split tokenized BLEU
against a hand-worked case and the Perl pipeline it stands in for."""

import csv
import importlib.util
import json
import math
import os
import pathlib
import shutil
import subprocess

import pytest
import sacrebleu

from t2t_repro.errors import ConfigurationError
from t2t_repro.metrics import bleu

WMT17_SYSTEMS = 16
# Real outputs of get_ende_bleu.sh's Perl steps; commits and commands are recorded inside.
PERL_OUTPUTS = json.loads((pathlib.Path(__file__).parent / "get_ende_bleu_perl_outputs.json")
                          .read_text(encoding="utf-8"))
COMPOUND_SPLIT_ONE_LINER = r"s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g"


def read_lines(path):
    with open(path, encoding="utf-8", newline="\n") as file:
        return [line.rstrip("\n") for line in file]


@pytest.fixture(scope="module")
def wmt17(shared_data_dir):
    return shared_data_dir / "bleu_fixtures" / "wmt17_en_de"


@pytest.fixture(scope="module")
def wmt17_reference(wmt17):
    return read_lines(wmt17 / "newstest2017-ende-ref.de")


def test_sacre_bleu_reproduces_published_wmt17_en_de_scores(wmt17, wmt17_reference):
    with open(wmt17 / "expected_scores.tsv", encoding="utf-8", newline="") as file:
        rows = list(csv.DictReader(file, delimiter="\t"))
    assert len(rows) == WMT17_SYSTEMS
    for row in rows:
        score = bleu.sacre_bleu(read_lines(wmt17 / row["system_file"]), wmt17_reference)
        system = row["system_file"]
        assert score.score == pytest.approx(float(row["sacrebleu_2.6.0_bleu"]), abs=0.01), system
        published = float(row["mteval_v13a_bleu_published"])
        assert score.score == pytest.approx(published, abs=0.01), system
        assert score.counts == [int(n) for n in row["matched_ngrams_1-4"].split(",")], system
        assert score.totals == [int(n) for n in row["total_ngrams_1-4"].split(",")], system
        assert (score.sys_len, score.ref_len) == (int(row["hyp_len"]), int(row["ref_len"])), system
    assert {row["signature"] for row in rows} == {bleu.sacre_bleu_signature()}


def test_compound_split_bleu_equals_the_perl_pipeline_on_wmt17(wmt17, wmt17_reference):
    # From running get_ende_bleu.sh's steps in Perl when this test was written: tokenizer.perl -l de
    # as of 2017 (before mosesdecoder PR #204), the `s{(\S)-(\S)}{...}g` split, multi-bleu.perl:
    # "BLEU = 28.46, 59.9/34.1/21.9/14.6 (BP=1.000, ratio=1.038, hyp_len=64495, ref_len=62141)".
    # Their tokens equalled ours on every line of all 17 files. (Today's tokenizer.perl splits
    # final periods after numbers and gives 28.47, hyp_len=64499, ref_len=62148.)
    hypotheses = read_lines(wmt17 / "newstest2017.uedin-nmt.4722.en-de")
    score = bleu.compound_split_bleu(hypotheses, wmt17_reference)
    assert round(score.score, 2) == 28.46
    assert (score.sys_len, score.ref_len) == (64495, 62141)
    # Same output, other measure: sacreBLEU gives 28.30.
    assert round(bleu.sacre_bleu(hypotheses, wmt17_reference).score, 2) == 28.30


def test_sacrebleu_unit_cases_that_fit(shared_data_dir):
    # Of sacreBLEU's own test cases these fit our two measures (one reference per sentence,
    # default options; multi-bleu.perl's no smoothing is floor 0.0). The others need several
    # references, floor or effective-order smoothing, another n-gram order, or raw statistics.
    path = shared_data_dir / "bleu_fixtures" / "sacrebleu_unit_cases"
    cases = json.loads((path / "sacrebleu_test_bleu_cases.json").read_text(encoding="utf-8"))
    for case in cases["ngram_statistics"]:
        [references] = case["refs"]
        for score in (bleu.sacre_bleu(case["hyps"], references),
                      bleu.compound_split_bleu(case["hyps"], references)):
            assert score.counts == case["matches_1to4"]
            assert score.totals == case["totals_1to4"]
        assert bleu.compound_split_bleu(case["hyps"], references).score == pytest.approx(
            100 * case["raw_corpus_bleu_floor_0.0_fraction"])
    # No shared word, or identical text: 0 and 100 whatever the smoothing.
    for case in cases["raw_corpus_bleu_floor_0.01"]:
        if case["expected_fraction"] in (0.0, 1.0) and "note" not in case:
            [references] = case["refs"]
            score = bleu.compound_split_bleu(case["hyps"], references)
            assert score.score == pytest.approx(100 * case["expected_fraction"])


def test_compound_split_bleu_matches_a_hand_worked_case():
    hypothesis = 'Das Wort-Spiel ist "gut".'
    reference = 'Das Wort-Spiel ist wirklich "gut".'
    # After Moses (quotes escaped and split off, final period split) and the compound split:
    #   hyp: Das Wort ##AT##-##AT## Spiel ist &quot; gut &quot; .           9 tokens
    #   ref: Das Wort ##AT##-##AT## Spiel ist wirklich &quot; gut &quot; .  10 tokens
    # 1-grams: all 9 in the reference (&quot; twice in both)                  9/9
    # 2-grams: all but "ist &quot;"                                            7/8
    # 3-grams: all but "Spiel ist &quot;", "ist &quot; gut"                   5/7
    # 4-grams: "Das Wort ##AT##-##AT## Spiel", "Wort ##AT##-##AT## Spiel ist",
    #          "&quot; gut &quot; ." match; the three through "ist &quot;" do not   3/6
    # BP = exp(1 - 10/9), as the hypothesis is shorter.
    expected = 100 * math.exp(1 - 10 / 9) * (9 / 9 * 7 / 8 * 5 / 7 * 3 / 6) ** (1 / 4)
    score = bleu.compound_split_bleu([hypothesis], [reference])
    assert score.counts == [9, 7, 5, 3]
    assert score.totals == [9, 8, 7, 6]
    assert (score.sys_len, score.ref_len) == (9, 10)
    assert score.score == pytest.approx(expected)  # 66.90


def test_compound_split_bleu_is_case_sensitive_and_unsmoothed():
    # "Das" is not "das", so the one 4-gram misses; with no smoothing (multi-bleu.perl) that makes
    # BLEU 0, where sacreBLEU's exp smoothing would give 3/4 of the 1- to 3-grams some credit.
    score = bleu.compound_split_bleu(["Das ist ein Test"], ["das ist ein Test"])
    assert score.counts == [3, 2, 1, 0]
    assert score.score == 0.0
    identical = bleu.compound_split_bleu(["Das ist ein Test"], ["Das ist ein Test"])
    assert identical.score == pytest.approx(100)


@pytest.mark.parametrize("tokenized, split", [
    ("Wort-Spiel", "Wort ##AT##-##AT## Spiel"),
    ("E-Mail-Adresse", "E ##AT##-##AT## Mail ##AT##-##AT## Adresse"),
    # Perl's /g resumes after a match, so the "b" taken by "a-b" cannot start "b-c".
    ("a-b-c", "a ##AT##-##AT## b-c"),
    # ... but over bytes: the match ends inside the two-byte "ö", whose second byte starts the next.
    ("ä-ö-ü", "ä ##AT##-##AT## ö ##AT##-##AT## ü"),
    ("a--b", "a ##AT##-##AT## -b"),
    ("40-jährigen", "40 ##AT##-##AT## jährigen"),
    ("x - y", "x - y"),
    ("-Start und Ende-", "-Start und Ende-"),
    # The Perl reads bytes: a no-break space is not whitespace to it.
    ("c\u00a0-d", "c\u00a0 ##AT##-##AT## d"),
])
def test_split_compounds_as_the_perl_one_liner(tokenized, split):
    assert bleu.split_compounds(tokenized) == split


@pytest.mark.parametrize("text, tokenized", [
    ('Er sagte: "Ja, gut".', "Er sagte : &quot; Ja , gut &quot; ."),
    ("Peter's & <b> [x] a|b", "Peter &apos; s &amp; &lt; b &gt; &#91; x &#93; a &#124; b"),
    ("1,5 Mio. Euro, am 3. Mai", "1,5 Mio. Euro , am 3. Mai"),
    ("Wort-Spiel", "Wort-Spiel"),  # no -a: hyphens are left to the compound split
    ("wie ein iPhone 5.", "wie ein iPhone 5."),  # 2017 tokenizer.perl, before PR #204
])
def test_moses_tokenize_as_tokenizer_perl(text, tokenized):
    assert bleu.moses_tokenize(text, "de") == tokenized


def test_bleu_report_labels_both_measures():
    hypotheses, references = ['Das Wort-Spiel ist "gut".'], ['Das Wort-Spiel ist wirklich "gut".']
    sacre_line, tokenized_line = bleu.bleu_report(hypotheses, references)
    assert sacre_line.startswith("sacreBLEU")
    assert bleu.sacre_bleu_signature() in sacre_line
    assert f"= {bleu.sacre_bleu(hypotheses, references).score:.2f} " in sacre_line
    assert "tokenized" in tokenized_line and "compound split" in tokenized_line
    assert "not comparable to sacreBLEU" in tokenized_line
    assert tokenized_line.endswith(
        ": BLEU = 66.90, 100.0/87.5/71.4/50.0 (BP=0.895, ratio=0.900, hyp_len=9, ref_len=10)")


def test_bleu_report_of_an_english_target_has_no_compound_split():
    lines = ["a well-known case here"]
    _, tokenized_line = bleu.bleu_report(lines, lines, "en")
    assert "tokenizer.perl -l en," in tokenized_line and "compound split" not in tokenized_line
    assert tokenized_line.endswith("BLEU = 100.00, 100.0/100.0/100.0/100.0 (BP=1.000, "
                                   "ratio=1.000, hyp_len=4, ref_len=4)")


@pytest.mark.parametrize("function", [bleu.sacre_bleu, bleu.compound_split_bleu, bleu.bleu_report])
def test_line_count_mismatch_is_an_error(function):
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        function(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="nothing to score"):
        function([], [])


def test_sacre_bleu_tokenizes_as_sacrebleu_does_for_the_target_language():
    """Chinese is unsegmented: sacreBLEU's `-l xx-zh` scores it with its zh tokenizer (a token
    per Chinese character), which 13a's whitespace-and-punctuation rules would leave as one
    token a sentence."""
    hypotheses = ["我喜欢猫和狗。", "今天天气很好。"]
    references = ["我喜欢狗和猫。", "今天的天气很好。"]
    ours = bleu.sacre_bleu(hypotheses, references, "zh")
    theirs = sacrebleu.corpus_bleu(hypotheses, [references], tokenize="zh")
    assert (ours.score, ours.counts, ours.totals) == (theirs.score, theirs.counts, theirs.totals)
    assert ours.score != bleu.sacre_bleu(hypotheses, references, "de").score
    assert "|tok:zh|" in bleu.sacre_bleu_signature("zh")
    assert "|tok:zh|" in bleu.bleu_report(hypotheses, references, "zh")[0]
    assert "|tok:13a|" in bleu.sacre_bleu_signature("de")


@pytest.mark.skipif(importlib.util.find_spec("MeCab") is not None,
                    reason="sacreBLEU's Japanese tokenizer is installed here")
def test_a_target_language_whose_tokenizer_is_a_sacrebleu_extra_names_the_install():
    with pytest.raises(ConfigurationError, match=r"^sacreBLEU tokenizes ja text with a package of "
                                                 r"its extras, not installed here: pip install "
                                                 r"'sacrebleu\[ja\]'.$"):
        bleu.sacre_bleu(["猫"], ["猫"], "ja")


def test_empty_hypotheses_are_scored_not_dropped():
    score = bleu.sacre_bleu(["", "the cat sat on the mat"], ["a dog", "the cat sat on the mat"])
    assert (score.sys_len, score.ref_len) == (6, 8)


@pytest.mark.parametrize("language", ["de", "en"])
def test_moses_tokenize_reproduces_recorded_tokenizer_perl(language):
    # Hard cases: hyphen chains, quotes, brackets, URLs, Unicode spaces, control characters, a
    # line of only a no-break space (echoed by the Perl), final `.'` (a trailing space).
    for case in PERL_OUTPUTS["tokenizer"][language]:
        assert bleu.moses_tokenize(case["input"], language) == case["output"], case["input"]


def test_split_compounds_reproduces_the_recorded_perl_one_liner():
    for case in PERL_OUTPUTS["compound_split"]:
        assert bleu.split_compounds(case["input"]) == case["output"], case["input"]


def test_multi_bleu_reproduces_recorded_multi_bleu_perl():
    # Includes a no-break space inside a token: multi-bleu.perl splits on ASCII whitespace only.
    for case in PERL_OUTPUTS["multi_bleu"]:
        score = bleu.multi_bleu(case["hypotheses"], case["references"])
        assert bleu.multi_bleu_line(score) == case["multi_bleu_perl"], case


def test_tokenized_bleu_reproduces_get_ende_bleu_on_all_wmt17_systems(wmt17, wmt17_reference):
    def prepare(lines):
        return [bleu.split_compounds(bleu.moses_tokenize(line, "de")) for line in lines]

    reference = prepare(wmt17_reference)
    recorded = PERL_OUTPUTS["wmt17_en_de_compound_split_multi_bleu"]
    assert len(recorded) == WMT17_SYSTEMS
    for system, perl_line in recorded.items():
        score = bleu.multi_bleu(prepare(read_lines(wmt17 / system)), reference)
        assert bleu.multi_bleu_line(score) == perl_line, system


def test_tokenized_bleu_splits_compounds_for_german_targets_only():
    # "well-known" against "well known": a split makes "well" and "known" unigram matches.
    hypotheses, references = ["a well-known case here"], ["a well known case here"]
    assert bleu.tokenized_bleu(hypotheses, references, "en").counts[0] == 3
    assert bleu.tokenized_bleu(hypotheses, references, "de").counts[0] == 5
    assert bleu.tokenized_bleu_name("de") == "bleu_tokenized_compound_split"
    assert bleu.tokenized_bleu_name("en") == "bleu_tokenized"


def _run_perl(arguments, lines):
    completed = subprocess.run(["perl", *arguments], input="".join(f"{line}\n" for line in lines)
                               .encode("utf-8"), capture_output=True, check=True)
    return completed.stdout.decode("utf-8").split("\n")[:-1]


@pytest.mark.skipif(shutil.which("perl") is None, reason="perl is not on PATH")
def test_split_compounds_equals_live_perl(shared_data_dir):
    lines = [case["input"] for case in PERL_OUTPUTS["compound_split"]]
    lines += read_lines(shared_data_dir / "wmt14_ende" / "newstest2014.de")
    assert [bleu.split_compounds(line) for line in lines] == _run_perl(
        ["-ple", COMPOUND_SPLIT_ONE_LINER], lines)


def _moses_scripts():
    scripts = os.environ.get("MOSES_SCRIPTS")
    if shutil.which("perl") is None or not scripts:
        pytest.skip("needs perl and MOSES_SCRIPTS set to a mosesdecoder scripts/ folder (the "
                    "recorded outputs are from commit 59119c0)")
    return pathlib.Path(scripts)


@pytest.mark.parametrize("language, path", [
    ("de", "wmt14_ende/newstest2014.de"), ("en", "wmt14_ende/newstest2014.en")])
def test_moses_tokenize_equals_live_tokenizer_perl(shared_data_dir, language, path):
    scripts = _moses_scripts()
    lines = [case["input"] for case in PERL_OUTPUTS["tokenizer"][language]]
    lines += read_lines(shared_data_dir / path)
    perl = _run_perl([str(scripts / "tokenizer" / "tokenizer.perl"), "-l", language, "-q"], lines)
    assert [bleu.moses_tokenize(line, language) for line in lines] == perl


def test_multi_bleu_equals_live_multi_bleu_perl(wmt17, wmt17_reference, tmp_path):
    scripts = _moses_scripts()
    hypotheses = [bleu.split_compounds(bleu.moses_tokenize(line, "de"))
                  for line in read_lines(wmt17 / "newstest2017.uedin-nmt.4722.en-de")]
    references = [bleu.split_compounds(bleu.moses_tokenize(line, "de"))
                  for line in wmt17_reference]
    reference_file = tmp_path / "reference"
    reference_file.write_text("".join(f"{line}\n" for line in references), encoding="utf-8")
    [perl_line] = _run_perl([str(scripts / "generic" / "multi-bleu.perl"), str(reference_file)],
                            hypotheses)
    assert bleu.multi_bleu_line(bleu.multi_bleu(hypotheses, references)) == perl_line
