"""`python -m t2t_repro.decoder --score_file` and `--checkpoint_path=A,B` on conftest's
briefly trained Multi30k model: the scores of real sentence pairs equal CTranslate2's
`score_batch` on the project's own conversion of the same weights; an ensemble of two
checkpoints scores as NumPy's log-mean-exp of the two models' probabilities, one of a run with
itself decodes and scores as the run; malformed lines and mixed vocabularies are one-line
errors naming them."""

import json
import shutil

import keras
import numpy as np
import pytest

from conftest import MULTI30K_DATA_HPARAMS, one_line_error, run_module

PAIRS = 24


@pytest.fixture(scope="module")
def pairs(shared_data_dir):
    """The first PAIRS (English, German) pairs of Multi30k's test_2016_flickr."""
    lines = {language: (shared_data_dir / "multi30k_ende" / f"test_2016_flickr.{language}")
             .read_text(encoding="utf-8").splitlines()[:PAIRS] for language in ("en", "de")}
    return list(zip(lines["en"], lines["de"]))


@pytest.fixture(scope="module")
def score_file(pairs, tmp_path_factory):
    path = tmp_path_factory.mktemp("score") / "pairs.tsv"
    path.write_text("".join(f"{en}\t{de}\n" for en, de in pairs), encoding="utf-8")
    return path


def decoder(ende_data_dir, output_dir, *args):
    return run_module("t2t_repro.decoder", "--problem=translate_ende",
                      f"--data_dir={ende_data_dir}", f"--output_dir={output_dir}", *args)


def scored(result):
    """The (score, pieces) of each line a successful run printed."""
    assert result.returncode == 0, result.stderr
    return [(float(score), int(pieces)) for score, pieces in
            (line.split("\t") for line in result.stdout.splitlines())]


@pytest.fixture(scope="module")
def run_scores(ende_data_dir, ende_run, score_file):
    return scored(decoder(ende_data_dir, ende_run, f"--score_file={score_file}"))


def test_scores_equal_ctranslate2_score_batch_on_real_sentences(ende_data_dir, ende_run, pairs,
                                                                score_file, tmp_path):
    """Written to --decode_to_file in batches of 5 (several batches, sorted by length)."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    import sentencepiece

    output = tmp_path / "scores.tsv"
    result = decoder(ende_data_dir, ende_run, f"--score_file={score_file}",
                     f"--decode_to_file={output}", "--decode_hparams=batch_size=5")
    assert result.returncode == 0, result.stderr
    assert f"scored {PAIRS}/{PAIRS} sentences" in result.stderr
    ours = [(float(score), int(pieces)) for score, pieces in
            (line.split("\t") for line in output.read_text().splitlines())]
    ct2_dir = tmp_path / "ct2"
    converted = run_module("t2t_repro.export_ctranslate2", f"--output_dir={ende_run}",
                           f"--ct2_dir={ct2_dir}")
    assert converted.returncode == 0, converted.stderr
    pieces = sentencepiece.SentencePieceProcessor(model_file=str(ct2_dir / "sentencepiece.model"))
    translator = ctranslate2.Translator(str(ct2_dir), device="cpu")
    theirs = translator.score_batch(
        [pieces.encode(en, out_type=str) + ["</s>"] for en, _ in pairs],
        [pieces.encode(de, out_type=str) for _, de in pairs])
    expected = [(sum(result.log_probs), len(result.tokens)) for result in theirs]
    assert [count for _, count in ours] == [count for _, count in expected]
    agreeing = sum(abs(score - reference) <= 1e-4
                   for (score, _), (reference, _) in zip(ours, expected))
    assert agreeing == PAIRS, list(zip(ours, expected))
    assert len({round(score, 3) for score, _ in ours}) == PAIRS, "scores should differ"


def test_a_line_without_a_tab_is_an_error_naming_its_line(ende_data_dir, ende_run, tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("A man.\tEin Mann.\nTwo dogs.\tZwei Hunde.\nno tab here\n", encoding="utf-8")
    message = one_line_error(decoder(ende_data_dir, ende_run, f"--score_file={bad}"))
    assert f"{bad} line 3: it has 0 tabs; a line to score is source<TAB>target" in message


@pytest.mark.parametrize("flag, named", [
    ("--decode_from_file={pairs}", "--decode_from_file"),
    ("--target_prefix_file={pairs}", "--target_prefix_file"),
    ("--decode_hparams=return_alignments=true", "decode hparam return_alignments=true"),
    ("--decode_hparams=alignment_layer=0", "decode hparam alignment_layer=0"),
    ("--decode_hparams=beam_size=1,sampling_method=random",
     "decode hparam beam_size=1, sampling_method=random"),
    ("--decode_hparams=beam_size=8,alpha=1.0,batch_size=2", "decode hparam beam_size=8, alpha=1.0"),
])
def test_score_file_takes_nothing_only_a_search_reads_or_writes(ende_data_dir, ende_run,
                                                                 score_file, flag, named):
    """An error, not ignored: scoring has no prefixes, alignments or samples to write, and no
    search whose beam, length penalty or length limit a setting would change (it reads the
    batch size alone)."""
    message = one_line_error(decoder(ende_data_dir, ende_run, f"--score_file={score_file}",
                                     flag.format(pairs=score_file)))
    assert message == (f"error: --score_file scores given translations; it takes no {named}, "
                       f"which only decoding uses.")


def test_an_ensemble_of_a_run_with_itself_scores_and_decodes_as_the_run(
        ende_data_dir, ende_run, score_file, run_scores, pairs, tmp_path):
    both = f"--checkpoint_path={ende_run},{ende_run / 'ckpt-100.weights.h5'}"
    result = decoder(ende_data_dir, ende_run, f"--score_file={score_file}", both)
    assert "Scoring with an ensemble of" in result.stderr
    ensemble = scored(result)
    assert [count for _, count in ensemble] == [count for _, count in run_scores]
    np.testing.assert_allclose([s for s, _ in ensemble], [s for s, _ in run_scores], atol=1e-4)

    sources = tmp_path / "sources.en"
    sources.write_text("".join(en + "\n" for en, _ in pairs[:8]), encoding="utf-8")
    beams = "--decode_hparams=beam_size=2,alpha=0.6,extra_length=5,return_beams=true"
    alone = decoder(ende_data_dir, ende_run, f"--decode_from_file={sources}", beams)
    together = decoder(ende_data_dir, ende_run, f"--decode_from_file={sources}", beams, both)
    assert alone.returncode == 0 and together.returncode == 0, together.stderr
    alone_beams, together_beams = beam_lines(alone), beam_lines(together)
    assert len(alone_beams) == 8 and all(len(texts) == 2 for texts, _ in alone_beams)
    assert [texts for texts, _ in together_beams] == [texts for texts, _ in alone_beams]
    np.testing.assert_allclose([scores for _, scores in together_beams],
                               [scores for _, scores in alone_beams], atol=1e-4)


def beam_lines(result):
    """Each line's (hypotheses, scores) of a `return_beams` decode: "text<TAB>score" pairs.
    The scores print with 4 decimals, so two equal within 1e-4 may print a last digit apart."""
    lines = [line.split("\t") for line in result.stdout.splitlines()]
    return [(fields[0::2], [float(score) for score in fields[1::2]]) for fields in lines]


def test_an_ensemble_of_two_checkpoints_scores_their_mean_probability(
        ende_data_dir, ende_run, score_file, run_scores, pairs):
    """Each piece's probability the mean of checkpoint 50's and 100's, computed here with
    NumPy from each model's own teacher-forced logits."""
    from problems.translate_ende import TranslateEnde

    from t2t_repro import hparams as hparams_lib
    from t2t_repro.training.run import load_trained_model

    checkpoints = [ende_run / f"ckpt-{step}.weights.h5" for step in (50, 100)]
    result = decoder(ende_data_dir, ende_run, f"--score_file={score_file}",
                     f"--checkpoint_path={checkpoints[0]},{checkpoints[1]}")
    ensemble = scored(result)

    problem = TranslateEnde(data_dir=str(ende_data_dir), data_hparams=MULTI30K_DATA_HPARAMS)
    hparams = hparams_lib.load(str(ende_run))
    log_probs = []
    for checkpoint in checkpoints:
        model = load_trained_model("transformer", hparams, problem, str(checkpoint))
        rows = []
        for en, de in pairs:
            target = np.array([problem.encode_target(de)], np.int32)
            logits = keras.ops.convert_to_numpy(model({
                "inputs": np.array([problem.encode(en)], np.int32),
                "targets": target})).astype(np.float64)[0]
            row = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
            rows.append(row[np.arange(target.shape[1]), target[0]])
        log_probs.append(rows)
        keras.backend.clear_session()
    expected = [np.sum(np.logaddexp(first, second) - np.log(2))
                for first, second in zip(*log_probs)]
    np.testing.assert_allclose([score for score, _ in ensemble], expected, atol=1e-4)
    alone_100 = [score for score, _ in run_scores]
    assert max(abs(a - b) for a, b in zip(expected, alone_100)) > 0.1, "50 should differ"


@pytest.mark.parametrize("ensemble", [True, False], ids=["ensemble member", "one checkpoint"])
def test_a_checkpoint_of_another_vocabulary_is_an_error_naming_it(
        ende_data_dir, ende_run, score_file, pairs, tmp_path, ensemble):
    """A checkpoint whose run (flags.txt) was trained on another vocabulary file, though its
    weights fit the model: an ensemble's member, or the one checkpoint decoded with."""
    from t2t_repro.data.vocabulary import train_vocabulary

    other_data = tmp_path / "other_data"
    other_data.mkdir()
    other_vocabulary = other_data / "translate_ende.spm.model"
    train_vocabulary([text for pair in pairs for text in pair] * 20, 400,
                     str(other_vocabulary))
    member = tmp_path / "other_run"
    member.mkdir()
    for name in ("hparams.json", "ckpt-100.weights.h5"):
        shutil.copy(ende_run / name, member / name)
    (member / "flags.txt").write_text(f"--problem=translate_ende\n--data_dir={other_data}\n")
    assert json.loads((member / "hparams.json").read_text())
    checkpoints, named = ((f"{ende_run},{member}", f"--checkpoint_path member {member}")
                          if ensemble else (member, f"--checkpoint_path={member}"))
    message = one_line_error(decoder(ende_data_dir, ende_run, f"--score_file={score_file}",
                                     f"--checkpoint_path={checkpoints}"))
    assert (f"{named} was trained with the vocabulary {other_vocabulary}, not "
            f"{ende_data_dir / 'translate_ende.spm.model'}") in message


def test_an_ensemble_member_of_an_unregistered_problem_is_an_error_naming_it(
        ende_data_dir, ende_run, score_file, tmp_path):
    """Its vocabulary cannot be found without the problem's code."""
    member = tmp_path / "other_run"
    member.mkdir()
    for name in ("hparams.json", "ckpt-100.weights.h5"):
        shutil.copy(ende_run / name, member / name)
    (member / "flags.txt").write_text("--problem=translate_elsewhere\n")
    message = one_line_error(decoder(ende_data_dir, ende_run, f"--score_file={score_file}",
                                     f"--checkpoint_path={ende_run},{member}"))
    assert (f"{member} was trained on problem translate_elsewhere, which is not registered "
            f"here; give the --t2t_usr_dir that registers it.") in message


def test_alignments_from_an_ensemble_are_an_error_naming_the_fix(ende_data_dir, ende_run, pairs,
                                                                 tmp_path):
    sources = tmp_path / "sources.en"
    sources.write_text(pairs[0][0] + "\n", encoding="utf-8")
    message = one_line_error(decoder(
        ende_data_dir, ende_run, f"--decode_from_file={sources}",
        "--decode_hparams=return_alignments=true",
        f"--checkpoint_path={ende_run},{ende_run / 'ckpt-100.weights.h5'}"))
    assert "return_alignments takes one model's attention, not an ensemble's" in message
