"""`python -m t2t_repro.decoder` on a briefly trained Multi30k model, as a user runs it: a file
with a reference, stdin, an averaged checkpoint, and the errors that must lose nothing."""

import re

import numpy as np
import pytest
import sacrebleu

from conftest import NUMPY_OUT_OF_MEMORY, allocate_unaddressable, output_lines, run_module

SOURCES = 8
# Beam 2, short outputs. After 100 steps the fixture's model writes varied German, and averaging
# its checkpoints at 50 and 100 changes its outputs.
DECODE_HPARAMS = "--decode_hparams=beam_size=2,alpha=0.6,extra_length=5"


@pytest.fixture(scope="module")
def trained_run(ende_run):
    """conftest's ende_run: transformer_tiny (one layer) trained 100 steps on Multi30k,
    checkpoints at 50 and 100."""
    return ende_run


@pytest.fixture(scope="module")
def test_files(shared_data_dir, tmp_path_factory):
    """The first SOURCES lines of Multi30k's test_2016_flickr, English and German."""
    directory = tmp_path_factory.mktemp("flickr")
    paths = {}
    for language in ("en", "de"):
        lines = (shared_data_dir / "multi30k_ende" / f"test_2016_flickr.{language}").read_text(
            encoding="utf-8").splitlines()[:SOURCES]
        paths[language] = directory / f"test.{language}"
        paths[language].write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return paths


def run_decoder(ende_data_dir, output_dir, *args, **kwargs):
    return run_module("t2t_repro.decoder", "--problem=translate_ende",
                      f"--data_dir={ende_data_dir}", f"--output_dir={output_dir}",
                      DECODE_HPARAMS, *args, **kwargs)


@pytest.fixture(scope="module")
def decoded(ende_data_dir, trained_run, test_files):
    """The decoder's run on the test file with DECODE_HPARAMS alone, which several tests
    compare against (each would otherwise decode it again)."""
    result = run_decoder(ende_data_dir, trained_run, f"--decode_from_file={test_files['en']}")
    assert result.returncode == 0, result.stderr
    return result


def test_decodes_a_file_and_scores_it_as_the_bleu_command_does(ende_data_dir, trained_run,
                                                                test_files, tmp_path):
    output = tmp_path / "out.de"
    result = run_decoder(ende_data_dir, trained_run, f"--decode_from_file={test_files['en']}",
                         f"--decode_to_file={output}", f"--decode_reference={test_files['de']}")
    assert result.returncode == 0, result.stderr
    assert f"decoded {SOURCES}/{SOURCES} sentences" in result.stderr
    assert "ckpt-100.weights.h5" in result.stderr and "beam_size=2" in result.stderr
    decodes = output.read_text(encoding="utf-8").splitlines()
    assert len(decodes) == SOURCES and all(decodes)

    # The BLEU it prints is sacreBLEU's on the written file, and `t2t_repro.bleu`'s report.
    references = test_files["de"].read_text(encoding="utf-8").splitlines()
    expected = sacrebleu.corpus_bleu(decodes, [references]).score
    printed = float(re.search(r"sacreBLEU .*? = ([\d.]+)", result.stdout).group(1))
    assert printed == pytest.approx(expected, abs=0.005)
    bleu = run_module("t2t_repro.bleu", f"--translation={output}",
                      f"--reference={test_files['de']}")
    assert bleu.returncode == 0, bleu.stderr
    assert bleu.stdout.strip() == result.stdout.strip()


def test_stdin_lines_are_decoded_like_the_file(ende_data_dir, trained_run, test_files,
                                               decoded):
    from_file = decoded
    typed = run_decoder(ende_data_dir, trained_run,
                        input=test_files["en"].read_text(encoding="utf-8"))
    assert typed.returncode == 0, typed.stderr
    assert output_lines(typed.stdout) == output_lines(from_file.stdout)[:SOURCES]
    assert len(output_lines(typed.stdout)) == SOURCES


def test_decodes_with_the_averaged_checkpoint(ende_data_dir, trained_run, test_files, decoded,
                                              tmp_path):
    average = run_module("t2t_repro.avg_checkpoints", f"--output_dir={trained_run}", "--n=2",
                         f"--avg_dir={tmp_path / 'avg'}")
    assert average.returncode == 0, average.stderr
    latest = decoded
    averaged = run_decoder(ende_data_dir, tmp_path / "avg",
                           f"--decode_from_file={test_files['en']}")
    by_path = run_decoder(ende_data_dir, trained_run, f"--checkpoint_path={tmp_path / 'avg'}",
                          f"--decode_from_file={test_files['en']}")
    for result in (latest, averaged, by_path):
        assert result.returncode == 0, result.stderr
    assert str(tmp_path / "avg" / "ckpt-100.weights.h5") in averaged.stderr
    assert by_path.stdout == averaged.stdout
    # Averaging steps 50 and 100 changes the weights, and so the translations.
    assert averaged.stdout != latest.stdout


def test_a_misaligned_reference_is_refused_before_decoding(ende_data_dir, trained_run,
                                                           test_files, tmp_path):
    short = tmp_path / "short.de"
    short.write_text("ein Satz\n", encoding="utf-8")
    output = tmp_path / "out.de"
    output.write_text("saved earlier\n", encoding="utf-8")
    result = run_decoder(ende_data_dir, trained_run, f"--decode_from_file={test_files['en']}",
                         f"--decode_to_file={output}", f"--decode_reference={short}")
    assert result.returncode != 0
    assert (f"error: --decode_from_file={test_files['en']} has {SOURCES} lines but "
            f"--decode_reference={short} has 1; they must be aligned" in result.stderr)
    assert output.read_text(encoding="utf-8") == "saved earlier\n"


@pytest.mark.parametrize("name, what", [
    ("translate_ende.spm.model", "is the vocabulary file"),  # the one both sides share
    ("translate_ende.datagen.json", "is a file of the translate_ende data in {data_dir}"),
])
def test_a_data_file_as_output_file_is_refused_naming_it(ende_data_dir, trained_run, test_files,
                                                         name, what):
    kept = ende_data_dir / name
    before = kept.read_bytes()
    result = run_decoder(ende_data_dir, trained_run, f"--decode_from_file={test_files['en']}",
                         f"--decode_to_file={kept}")
    assert result.returncode == 1 and result.stderr.strip().splitlines() == [
        f"error: --decode_to_file={kept} {what.format(data_dir=ende_data_dir)}; writing it would "
        f"replace it. Name another output file."]
    assert kept.read_bytes() == before


def test_stdin_cannot_be_decoded_to_a_file(ende_data_dir, trained_run, tmp_path):
    output = tmp_path / "out.de"
    result = run_decoder(ende_data_dir, trained_run, f"--decode_to_file={output}",
                         input="A man.\n")
    assert result.returncode == 1 and result.stderr.strip().splitlines() == [
        "error: --decode_to_file needs --decode_from_file (or --score_file): sentences read "
        "from stdin are decoded to stdout; redirect it (> FILE) instead."]
    assert not output.exists()


def test_a_stdin_line_too_long_is_answered_by_a_blank_line(ende_data_dir, trained_run,
                                                          test_files, decoded):
    """The output keeps one line an input, as `cat file | decoder > out` needs."""
    sources = test_files["en"].read_text(encoding="utf-8").splitlines()
    typed = run_decoder(ende_data_dir, trained_run, "--max_input_tokens=40",
                        input="".join(line + "\n" for line in [
                            sources[0], "word " * 60, sources[1]]))
    assert typed.returncode == 0, typed.stderr
    assert "error: stdin line 2 skipped: " in typed.stderr
    assert typed.stdout.split("\n") == [*output_lines(decoded.stdout)[:1], "",
                                        *output_lines(decoded.stdout)[1:2], ""]


def test_an_empty_input_gives_an_empty_output(ende_data_dir, trained_run, tmp_path):
    empty = tmp_path / "empty.en"
    empty.write_text("")
    result = run_decoder(ende_data_dir, trained_run, f"--decode_from_file={empty}")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""


def test_no_checkpoint_is_a_clear_error(ende_data_dir, trained_run, test_files, tmp_path):
    result = run_decoder(ende_data_dir, trained_run, f"--checkpoint_path={tmp_path}",
                         f"--decode_from_file={test_files['en']}")
    assert result.returncode != 0
    assert (f"--checkpoint_path={tmp_path} holds no checkpoint (ckpt-<step>.weights.h5); train "
            f"first, or name a checkpoint file or a folder holding one." in result.stderr)
    missing = run_decoder(ende_data_dir, trained_run, f"--checkpoint_path={tmp_path / 'gone'}",
                          f"--decode_from_file={test_files['en']}")
    assert missing.returncode == 1 and missing.stderr.strip().splitlines()[-1] == (
        f"error: --checkpoint_path={tmp_path / 'gone'} does not exist; name a checkpoint file "
        f"or a folder holding one.")


def test_a_search_out_of_memory_is_one_line_naming_the_settings_to_lower(
        ende_data_dir, trained_run, test_files, tmp_path, monkeypatch):
    """The search asks for more bytes than a process can address (a real allocation failure,
    at once on any machine); nothing is written. (TensorFlow's error: test_out_of_memory.py.)"""
    from t2t_repro.decoding.transformer_search import TransformerBeamSearch

    monkeypatch.setattr(TransformerBeamSearch, "__call__", allocate_unaddressable)
    output = tmp_path / "out.de"
    result = run_decoder(ende_data_dir, trained_run, f"--decode_from_file={test_files['en']}",
                         f"--decode_to_file={output}",
                         "--decode_hparams=beam_size=3,extra_length=7,batch_size=4")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"error: decoding ran out of memory ({NUMPY_OUT_OF_MEMORY}); lower beam_size (now 3), "
        f"batch_size (now 4 sentences) or extra_length (now 7 tokens) in --decode_hparams.")
    assert not output.exists()


def test_a_run_whose_hparams_json_lost_an_hparam_is_one_line_naming_it(
        ende_data_dir, trained_run, test_files, tmp_path):
    """The model's build reads it (the checkpoint's stored hparams are compared after)."""
    import json
    import shutil

    removed = "hidden_size"
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    values = json.loads((run / "hparams.json").read_text())
    del values[removed]
    (run / "hparams.json").write_text(json.dumps(values))
    result = run_module("t2t_repro.decoder", "--problem=translate_ende",
                        f"--data_dir={ende_data_dir}", f"--output_dir={run}", DECODE_HPARAMS,
                        f"--decode_from_file={test_files['en']}")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"error: hparam '{removed}' is missing from the hparams in use (a run's hparams.json "
        f"edited by hand?): restore the file from a copy, or delete it and give the run's "
        f"--hparams_set and --hparams again (its checkpoints are kept).")


def test_bad_decode_hparams_name_the_setting(ende_data_dir, trained_run, test_files):
    result = run_module("t2t_repro.decoder", "--problem=translate_ende",
                        f"--data_dir={ende_data_dir}", f"--output_dir={trained_run}",
                        "--decode_hparams=beam=4", f"--decode_from_file={test_files['en']}")
    assert result.returncode != 0
    assert "beam" in result.stderr and "beam_size" in result.stderr


def test_return_beams_writes_every_hypothesis_with_its_score(ende_data_dir, trained_run,
                                                             test_files, decoded):
    best = decoded
    beams = run_decoder(ende_data_dir, trained_run, f"--decode_from_file={test_files['en']}",
                        "--decode_hparams=beam_size=2,alpha=0.6,extra_length=5,return_beams=true")
    assert beams.returncode == 0, beams.stderr
    for best_line, line in zip(output_lines(best.stdout), output_lines(beams.stdout), strict=True):
        first, first_score, second, second_score = line.split("\t")
        assert first == best_line
        assert float(first_score) >= float(second_score)


def pairs_of(alignment):
    return [tuple(map(int, pair.split("-"))) for pair in alignment.split()]


def test_return_alignments_appends_pharaoh_pairs_of_pieces_or_words(ende_data_dir, trained_run,
                                                                     test_files, decoded):
    """Each line is the best hypothesis, a tab, and its alignment: with pieces, one pair per
    target piece (EOS left out) naming a source piece; with words, the same pairs merged by
    SentencePiece's word starts."""
    from problems.translate_ende import TranslateEnde
    from conftest import MULTI30K_DATA_HPARAMS

    vocabulary = TranslateEnde(data_dir=str(ende_data_dir),
                               data_hparams=MULTI30K_DATA_HPARAMS).vocabulary
    best = decoded
    by_unit = {}
    for unit in ("piece", "word"):
        result = run_decoder(
            ende_data_dir, trained_run, f"--decode_from_file={test_files['en']}",
            f"--decode_hparams=beam_size=2,alpha=0.6,extra_length=5,return_alignments=true,"
            f"alignment_unit={unit}")
        assert result.returncode == 0, result.stderr
        by_unit[unit] = output_lines(result.stdout)[:SOURCES]
    sources = test_files["en"].read_text(encoding="utf-8").splitlines()
    for source, best_line, piece_line, word_line in zip(
            sources, output_lines(best.stdout), by_unit["piece"], by_unit["word"]):
        text, piece_alignment = piece_line.split("\t")
        assert text == best_line
        source_pieces = vocabulary.encode(source)
        target_pieces = vocabulary.encode(text)
        pairs = pairs_of(piece_alignment)
        assert pairs == sorted(pairs)  # by source, then target index
        assert sorted(j for _, j in pairs) == list(range(len(target_pieces)))
        assert all(0 <= i < len(source_pieces) for i, _ in pairs)
        # Words: each piece pair mapped through the pieces' word indices.
        pieces = vocabulary.all_pieces()
        source_words = alignments_word_indices([pieces[i] for i in source_pieces])
        target_words = alignments_word_indices([pieces[i] for i in target_pieces])
        expected = sorted({(source_words[i], target_words[j]) for i, j in pairs})
        word_text, word_alignment = word_line.split("\t")
        assert word_text == text
        assert pairs_of(word_alignment) == expected
        assert {j for _, j in expected} == set(range(len(text.split())))


def alignments_word_indices(pieces):
    from t2t_repro.decoding.alignments import word_indices

    return word_indices(pieces)


@pytest.mark.parametrize("setting, named", [
    ("return_alignments=true,alignment_layer=5",
     "alignment_layer=5: the model has 1 decoder layer; use 0, or -1 for the last."),
    ("return_alignments=true,return_beams=true", "return_alignments and return_beams"),
])
def test_alignment_settings_that_cannot_work_are_one_line_errors(ende_data_dir, trained_run,
                                                                 test_files, setting, named):
    from conftest import one_line_error

    result = run_decoder(ende_data_dir, trained_run, f"--decode_from_file={test_files['en']}",
                         f"--decode_hparams=beam_size=2,{setting}")
    assert named in one_line_error(result)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_a_target_prefix_file_starts_each_output_with_its_line(ende_data_dir, trained_run,
                                                                test_files, tmp_path,
                                                                beam_size):
    """Lines with a prefix begin with it; an empty line decodes as without the file."""
    prefixes = ["Ein Mann", "", "Zwei", "", "Eine Frau in", "", "Ein", ""]
    prefix_file = tmp_path / "prefixes.de"
    prefix_file.write_text("".join(line + "\n" for line in prefixes), encoding="utf-8")
    hparams = f"--decode_hparams=beam_size={beam_size},alpha=0.6,extra_length=5"
    plain = run_decoder(ende_data_dir, trained_run, f"--decode_from_file={test_files['en']}",
                        hparams)
    forced = run_decoder(ende_data_dir, trained_run, f"--decode_from_file={test_files['en']}",
                         hparams, f"--target_prefix_file={prefix_file}")
    assert forced.returncode == 0, forced.stderr
    for prefix, line, unforced in zip(prefixes, output_lines(forced.stdout),
                                      output_lines(plain.stdout), strict=True):
        if prefix:
            assert line.startswith(prefix), (prefix, line)
        else:
            assert line == unforced
    assert forced.stdout != plain.stdout


def test_a_target_prefix_file_of_another_length_is_refused(ende_data_dir, trained_run,
                                                           test_files, tmp_path):
    prefix_file = tmp_path / "prefixes.de"
    prefix_file.write_text("Ein Mann\n", encoding="utf-8")
    result = run_decoder(ende_data_dir, trained_run, f"--decode_from_file={test_files['en']}",
                         f"--target_prefix_file={prefix_file}")
    assert result.returncode == 1
    assert (f"error: --target_prefix_file has 1 lines but --decode_from_file has {SOURCES}"
            in result.stderr)
    assert "decoded" not in result.stderr


def test_sampling_is_reproducible_under_random_seed(ende_data_dir, trained_run, test_files):
    def sample(seed):
        result = run_decoder(ende_data_dir, trained_run, f"--decode_from_file={test_files['en']}",
                             "--decode_hparams=beam_size=1,sampling_method=random,"
                             "sampling_keep_top_p=0.95,extra_length=5", f"--random_seed={seed}")
        assert result.returncode == 0, result.stderr
        assert "sampling_method=random" in result.stderr
        return output_lines(result.stdout)

    first = sample(3)
    assert len(first) == SOURCES
    assert sample(3) == first
    assert sample(4) != first


def test_sampling_with_a_beam_is_an_error_saying_what_to_set(ende_data_dir, trained_run,
                                                              test_files):
    result = run_decoder(ende_data_dir, trained_run, f"--decode_from_file={test_files['en']}",
                         "--decode_hparams=beam_size=4,sampling_method=random")
    assert result.returncode == 1
    assert ("error: sampling_method=random samples one hypothesis per sentence and needs "
            "beam_size=1, got beam_size=4; add beam_size=1 to --decode_hparams."
            in result.stderr.splitlines())


def test_decode_precision_decodes_with_the_models_copy_in_that_precision(ende_data_dir,
                                                                        trained_run, test_files):
    """--decode_precision=bfloat16 writes the hypotheses and scores that a search over
    `model_in_precision(model, "bfloat16")` of the same checkpoint finds, and its scores are
    not float32's (bfloat16 rounds every product to 8 significant bits)."""
    from t2t_repro.bench.search import load_run
    from t2t_repro.decoding.file_decoding import read_sources
    from t2t_repro.decoding.precision import model_in_precision
    from t2t_repro.decoding.text_decoding import (
        create_decode_hparams, create_search, decode_id_lists)

    settings = "beam_size=2,alpha=0.6,extra_length=5,return_beams=true"
    written = {precision: run_decoder(ende_data_dir, trained_run,
                                      f"--decode_from_file={test_files['en']}",
                                      f"--decode_hparams={settings}",
                                      f"--decode_precision={precision}")
               for precision in ("float32", "bfloat16")}
    for precision, result in written.items():
        assert result.returncode == 0, result.stderr
        assert f"in {precision}." in result.stderr
    problem, model = load_run(trained_run)
    decode_hparams = create_decode_hparams(problem, settings)
    search = create_search(model_in_precision(model, "bfloat16"), decode_hparams)
    outputs = decode_id_lists(search, read_sources(problem, test_files["en"])[1],
                              decode_hparams.batch_size)
    scores = {precision: [[float(score) for score in line.split("\t")[1::2]]
                          for line in output_lines(result.stdout)]
              for precision, result in written.items()}
    for line, line_scores, (ids, beam_scores) in zip(
            output_lines(written["bfloat16"].stdout), scores["bfloat16"], outputs, strict=True):
        assert line.split("\t")[::2] == [problem.decode(beam) for beam in ids]
        np.testing.assert_allclose(line_scores, beam_scores, atol=5e-5)
    assert scores["bfloat16"] != scores["float32"]
