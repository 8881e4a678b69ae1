"""The BLEU command line, run as a user runs it: `python -m t2t_repro.bleu ...`."""

import csv
import re

import pytest

from conftest import run_module

SYSTEM = "newstest2017.uedin-nmt.4722.en-de"


def run_bleu(*args):
    return run_module("t2t_repro.bleu", *args)


@pytest.fixture(scope="module")
def wmt17(shared_data_dir):
    return shared_data_dir / "bleu_fixtures" / "wmt17_en_de"


def test_prints_the_published_sacrebleu_score_and_the_tokenized_bleu(wmt17):
    with open(wmt17 / "expected_scores.tsv", encoding="utf-8", newline="") as file:
        [expected] = [row for row in csv.DictReader(file, delimiter="\t")
                      if row["system_file"] == SYSTEM]
    result = run_bleu(f"--translation={wmt17 / SYSTEM}",
                      f"--reference={wmt17 / 'newstest2017-ende-ref.de'}")
    assert result.returncode == 0, result.stderr
    sacre_line, tokenized_line = result.stdout.splitlines()

    assert sacre_line.startswith("sacreBLEU")
    assert f"BLEU|{expected['signature']} = " in sacre_line
    score = float(re.search(r" = (\d+\.\d+) ", sacre_line).group(1))
    assert score == pytest.approx(float(expected["sacrebleu_2.6.0_bleu"]), abs=0.01)
    assert score == pytest.approx(float(expected["mteval_v13a_bleu_published"]), abs=0.01)
    assert f"hyp_len = {expected['hyp_len']} ref_len = {expected['ref_len']}" in sacre_line

    assert "tokenized" in tokenized_line and "not comparable to sacreBLEU" in tokenized_line
    assert "BLEU = 28.46, " in tokenized_line  # multi-bleu.perl's format


def test_line_count_mismatch_names_both_files(wmt17, tmp_path):
    short = tmp_path / "short.de"
    short.write_text("Ein Satz.\nNoch einer.\n", encoding="utf-8")
    reference = wmt17 / "newstest2017-ende-ref.de"
    result = run_bleu(f"--translation={short}", f"--reference={reference}")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert (f"error: --translation={short} has 2 lines but --reference={reference} has 3004"
            in result.stderr)


def test_missing_file_is_a_one_line_error(tmp_path):
    missing = tmp_path / "absent.de"
    result = run_bleu(f"--translation={missing}", f"--reference={missing}")
    assert result.returncode != 0
    assert result.stderr.strip() == (
        f"error: cannot read --translation={missing}: No such file or directory.")


def test_missing_flag_is_an_error():
    result = run_bleu("--reference=ref.de")
    assert result.returncode != 0
    assert result.stderr.strip() == "error: missing --translation; see --help."


@pytest.mark.parametrize("language", ["DE", "zh-CN", ""])
def test_a_language_the_tokenizers_would_not_recognise_is_an_error(tmp_path, language):
    """sacreBLEU picks zh's tokenizer for "zh" alone, and the compound split is for "de"
    alone: "ZH", "zh-CN" or "DE" would be scored as another language, without a word."""
    text = tmp_path / "out.de"
    text.write_text("Ein Satz.\n", encoding="utf-8")
    result = run_bleu(f"--translation={text}", f"--reference={text}", f"--language={language}")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip() == (
        f"error: --language={language!r} must be a language's ISO 639 code in lower case, "
        f"e.g. de (zh, not ZH or zh-CN), which BLEU's tokenizers follow.")
