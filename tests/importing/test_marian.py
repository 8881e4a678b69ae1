"""Marian / OPUS-MT models imported as runs compute what CTranslate2 computes from the same
files with its own converter (an independent engine): on random Marian Transformers built
here (`marian_models`: post-norm and pre-norm; one, two and three embedding matrices; Swish,
ReLU and Marian's GELU) with SentencePiece models trained on Multi30k, our greedy outputs
equal CTranslate2's on real sentences, so do beam-4 outputs (where they differ, ours is a
finished hypothesis that CTranslate2's search, which keeps beam-size candidates a step where
tensor2tensor's keeps twice as many, never reached, and it scores higher under CTranslate2
itself), and teacher-forced log-probabilities of the reference translations equal
CTranslate2's `score_batch` within 1e-4. CTranslate2 gets Marian's position table (`Wpos`):
its converter would build the paper's spacing. The imported run exports to a SavedModel that
answers as our decoder does, and fine-tunes with --warm_start_from on TensorFlow and on JAX. A
truncated `.npz`, a missing vocabulary and options the model cannot compute are one-line errors
naming the file, with nothing written."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import yaml

ctranslate2 = pytest.importorskip("ctranslate2")

from conftest import (  # noqa: E402
    HANG_GUARD_S,
    RUN_EXPORT,
    one_line_error,
    output_lines,
    run_module,
)
from ctranslate2.converters import MarianConverter  # noqa: E402
from importing.fine_tuning import (  # noqa: E402
    fine_tune_one_step_on_both_backends,
    largest_weight_move,
)
from importing.marian_models import (  # noqa: E402
    MarianOptions,
    model_yml,
    write_opus_mt_folder,
)
from t2t_repro.importing.marian import opus_mt_files  # noqa: E402

TRAIN_LINES, TEST_LINES = 2000, 16
MAX_LENGTH = 30
MODELS = {
    "post-norm, one embedding, swish": MarianOptions(),
    "pre-norm, three matrices, relu": MarianOptions(pre_norm=True, tied="none",
                                                    activation="relu", seed=1),
    "post-norm, decoder tied to output, gelu": MarianOptions(tied="decoder", activation="gelu",
                                                             seed=2),
}


def read_lines(path, count):
    return path.read_text(encoding="utf-8").splitlines()[:count]


@pytest.fixture(scope="module")
def multi30k(shared_data_dir):
    folder = shared_data_dir / "multi30k_ende"
    return {"train": [read_lines(folder / f"train.{side}", TRAIN_LINES) for side in ("de", "en")],
            "test.de": read_lines(folder / "test_2016_flickr.de", TEST_LINES),
            "test.en": read_lines(folder / "test_2016_flickr.en", TEST_LINES)}


def import_model(*flags):
    return run_module("t2t_repro.import_model", "--source_language=de", "--target_language=en",
                      *flags)


@pytest.fixture(scope="module")
def opus_mt_release(multi30k, tmp_path_factory):
    """The first model's OPUS-MT release folder, which the bad-input tests copy too."""
    folder = tmp_path_factory.mktemp("opus_mt") / "release"
    return write_opus_mt_folder(str(folder), *multi30k["train"], MODELS[list(MODELS)[0]])


def loaded(root, run, files):
    """The imported `run` loaded as a model with its problem, beside CTranslate2's own
    conversion (MarianConverter) of the same release `files`."""
    from t2t_repro import registry
    from t2t_repro.hparams import load
    from t2t_repro.training.checkpoints import latest_checkpoint
    from t2t_repro.training.run import load_trained_model

    MarianConverter(files["model.ctranslate2.npz"], files["vocabs"]).convert(str(root / "ct2"))
    problem = registry.problems["translate_text_files"](data_dir=str(run / "data"))
    problem.check_data()
    model = load_trained_model("transformer", load(str(run)), problem, latest_checkpoint(str(run)))
    return {"run": run, "files": files, "problem": problem, "model": model,
            "translator": ctranslate2.Translator(str(root / "ct2"), device="cpu")}


@pytest.fixture(scope="module")
def opus_mt_imported(opus_mt_release, tmp_path_factory):
    """The first model, imported from its OPUS-MT release folder."""
    root = tmp_path_factory.mktemp("marian")
    result = import_model("--format=opus_mt",
                          f"--model_dir={os.path.dirname(opus_mt_release['model.npz'])}",
                          f"--output_dir={root / 'run'}")
    assert result.returncode == 0, result.stderr
    return loaded(root, root / "run", opus_mt_release)


@pytest.fixture(scope="module", params=list(MODELS), ids=list(MODELS))
def imported(request, multi30k, tmp_path_factory):
    """Each model built and imported (the first from its OPUS-MT folder, the others with
    --format=marian), loaded, and converted by CTranslate2's MarianConverter."""
    if request.param == list(MODELS)[0]:
        return request.getfixturevalue("opus_mt_imported")
    root = tmp_path_factory.mktemp("marian")
    files = write_opus_mt_folder(str(root / "release"), *multi30k["train"],
                                 MODELS[request.param])
    result = import_model("--format=marian", f"--model_file={files['model.npz']}",
                          f"--vocabs={','.join(files['vocabs'])}",
                          f"--sentencepiece_models={files['source.spm']},{files['target.spm']}",
                          f"--output_dir={root / 'run'}")
    assert result.returncode == 0, result.stderr
    return loaded(root, root / "run", files)


def source_batch(problem, texts):
    ids = [problem.encode(text) for text in texts]
    batch = np.zeros((len(ids), max(map(len, ids))), np.int32)
    for row, row_ids in enumerate(ids):
        batch[row, : len(row_ids)] = row_ids
    return batch


def ctranslate2_tokens(problem, texts):
    """The source pieces CTranslate2 reads: SentencePiece's pieces of our ids (the same
    pieces as the release's source.spm gives, which `test_pieces_are_the_releases` checks)."""
    vocabulary = problem.source_vocabulary
    return [[vocabulary.all_pieces()[i] for i in vocabulary.encode(text)] for text in texts]


def our_ids_of(problem, pieces):
    index = {piece: i for i, piece in enumerate(problem.target_vocabulary.all_pieces())}
    return [index[piece] for piece in pieces]


def test_pieces_are_the_releases(imported, multi30k):
    """Our rewritten source model segments as the release's source.spm does."""
    import sentencepiece

    release = sentencepiece.SentencePieceProcessor(model_file=imported["files"]["source.spm"])
    texts = multi30k["test.de"]
    assert ctranslate2_tokens(imported["problem"], texts) == release.encode(texts, out_type=str)


def search(imported, texts, beam_size):
    """(our best ids without padding and EOS, CTranslate2's best as our ids)."""
    from t2t_repro.decoding.transformer_search import TransformerBeamSearch
    from t2t_repro.names import EOS_ID, PAD_ID

    problem = imported["problem"]
    ours = TransformerBeamSearch(imported["model"], beam_size=beam_size, alpha=0.0)(
        source_batch(problem, texts), np.full(len(texts), MAX_LENGTH)).best()
    theirs = imported["translator"].translate_batch(
        ctranslate2_tokens(problem, texts), beam_size=beam_size, length_penalty=0,
        min_decoding_length=0, max_decoding_length=MAX_LENGTH)
    return ([[int(i) for i in row if i not in (PAD_ID, EOS_ID)] for row in ours],
            [our_ids_of(problem, result.hypotheses[0]) for result in theirs])


def test_greedy_outputs_equal_ctranslate2s(imported, multi30k):
    ours, theirs = search(imported, multi30k["test.de"], beam_size=1)
    assert ours == theirs
    assert len({tuple(ids) for ids in ours}) > 1  # the sources matter


def test_beam_4_outputs_equal_ctranslate2s_or_score_higher_under_it(imported, multi30k):
    """At α 0 random models favour short outputs, which tensor2tensor's search (ours) finds
    among its 2 × beam candidates a step and CTranslate2's, with beam candidates, drops: every
    output that differs must be one CTranslate2 itself scores higher than its own."""
    texts = multi30k["test.de"]
    ours, theirs = search(imported, texts, beam_size=4)
    differ = [row for row in range(len(texts)) if ours[row] != theirs[row]]
    target_pieces = imported["problem"].target_vocabulary.all_pieces()
    for row in differ:
        scores = [sum(result.log_probs) for result in imported["translator"].score_batch(
            ctranslate2_tokens(imported["problem"], [texts[row]]) * 2,
            [[target_pieces[i] for i in ids] for ids in (ours[row], theirs[row])])]
        assert scores[0] > scores[1] + 1e-3, (row, scores)
    assert len(differ) <= len(texts) * 3 // 4
    print(f"beam 4: {len(texts) - len(differ)}/{len(texts)} equal")


def test_teacher_forced_log_probabilities_equal_ctranslate2s(imported, multi30k):
    problem, references = imported["problem"], multi30k["test.en"]
    targets = [problem.encode_target(text) for text in references]
    padded = np.zeros((len(targets), max(map(len, targets))), np.int32)
    for row, ids in enumerate(targets):
        padded[row, : len(ids)] = ids
    logits = imported["model"]({"inputs": source_batch(problem, multi30k["test.de"]),
                                "targets": padded}).numpy()
    log_probs = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
    target_pieces = problem.target_vocabulary.all_pieces()
    theirs = imported["translator"].score_batch(
        ctranslate2_tokens(problem, multi30k["test.de"]),
        [[target_pieces[i] for i in ids[:-1]] for ids in targets])
    largest = 0.0
    for row, result in enumerate(theirs):
        ours = log_probs[row, np.arange(len(targets[row])), targets[row]]
        np.testing.assert_allclose(result.log_probs, ours, atol=1e-4)
        largest = max(largest, float(np.max(np.abs(np.array(result.log_probs) - ours))))
    print(f"largest teacher-forced log-probability difference: {largest:.2e}")


def test_word_alignments_merge_each_sides_pieces_by_its_own_vocabulary(opus_mt_imported,
                                                                       multi30k):
    """The imported run has a SentencePiece model per side (over one joint list of pieces): a
    word alignment is its piece alignment with the source ids read in the source vocabulary and
    the target ids in the target one. (Sides with different pieces: test_alignments.py.)"""
    from t2t_repro.decoding.alignments import Aligner, add_alignment_hparams, word_indices
    from t2t_repro.hparams import HParams

    problem = opus_mt_imported["problem"]
    assert not problem.shared_vocabulary
    source_pieces = problem.source_vocabulary.all_pieces()
    target_pieces = problem.target_vocabulary.all_pieces()
    texts = multi30k["test.de"][:4]
    outputs, _ = search(opus_mt_imported, texts, beam_size=1)
    sources = [problem.encode(text) for text in texts]
    lines = {}
    for unit in ("piece", "word"):
        asked = add_alignment_hparams(HParams()).override_from_string(
            f"return_alignments=true,alignment_unit={unit}")
        lines[unit] = Aligner(opus_mt_imported["model"], problem, asked)(sources, outputs)
    for source, output, piece_line, word_line in zip(sources, outputs, lines["piece"],
                                                     lines["word"], strict=True):
        source_words = word_indices([source_pieces[i] for i in source[:-1]])
        target_words = word_indices([target_pieces[i] for i in output])
        pairs = [tuple(map(int, pair.split("-"))) for pair in piece_line.split()]
        assert sorted(j for _, j in pairs) == list(range(len(output)))
        expected = sorted({(source_words[i], target_words[j]) for i, j in pairs})
        assert word_line == " ".join(f"{i}-{j}" for i, j in expected)


def test_the_export_answers_as_the_decoder_and_the_run_fine_tunes(opus_mt_imported, multi30k,
                                                                   tmp_path):
    """On the OPUS-MT folder's model alone: exporting and training cost seconds."""
    imported = opus_mt_imported
    run, decode_hparams = imported["run"], "--decode_hparams=beam_size=2,alpha=0.6,extra_length=5"
    source = tmp_path / "test.de"
    source.write_text("".join(line + "\n" for line in multi30k["test.de"][:8]), encoding="utf-8")
    exported = run_module("t2t_repro.exporter", f"--output_dir={run}", decode_hparams)
    assert exported.returncode == 0, exported.stderr
    decoded = run_module("t2t_repro.decoder", f"--output_dir={run}", decode_hparams,
                         f"--decode_from_file={source}")
    assert decoded.returncode == 0, decoded.stderr
    # The SavedModel runs in a fresh process with TensorFlow alone (serving/run_export.py),
    # started now so that its start-up overlaps the fine-tuning below.
    texts = tmp_path / "texts.json"
    texts.write_text(json.dumps({"export": str(run / "export" / "0"),
                                 "request": multi30k["test.de"][:8]}) + "\n", encoding="utf-8")
    with open(texts, encoding="utf-8") as stdin:
        serving = subprocess.Popen([sys.executable, str(RUN_EXPORT)],
                                   stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)

    for side, lines in zip(("de", "en"), multi30k["train"]):
        (tmp_path / f"train.{side}").write_text("".join(line + "\n" for line in lines[:50]),
                                                encoding="utf-8")
    data = run / "data"
    generated = run_module(
        "t2t_repro.datagen", "--problem=translate_text_files", f"--data_dir={tmp_path / 'data'}",
        f"--data_hparams=train_source={tmp_path / 'train.de'},train_target="
        f"{tmp_path / 'train.en'},eval_source={tmp_path / 'train.de'},eval_target="
        f"{tmp_path / 'train.en'},source_language=de,target_language=en,shared_vocabulary="
        f"false,source_vocabulary={data / 'translate_text_files.source.spm.model'},"
        f"target_vocabulary={data / 'translate_text_files.target.spm.model'},"
        f"num_train_shards=1")
    assert generated.returncode == 0, generated.stderr
    runs = fine_tune_one_step_on_both_backends(
        run, ["--problem=translate_text_files", f"--data_dir={tmp_path / 'data'}"], tmp_path)
    for backend, tuned_run in runs.items():
        move = largest_weight_move(run / "ckpt-0.weights.h5", tuned_run / "ckpt-1.weights.h5")
        assert 0 < move <= 1e-5, (backend, move)

    output, errors = serving.communicate(timeout=HANG_GUARD_S)
    assert serving.returncode == 0, errors
    answers = json.loads(output)
    assert answers["signatures"]["serving_default"]["outputs"] == output_lines(decoded.stdout)


# --- Bad input --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def release(opus_mt_release):
    return pathlib.Path(opus_mt_release["model.npz"]).parent


def copied_release(release, tmp_path):
    import shutil

    folder = tmp_path / "release"
    shutil.copytree(release, folder)
    return folder


def failed_import(folder, tmp_path):
    result = import_model("--format=opus_mt", f"--model_dir={folder}",
                          f"--output_dir={tmp_path / 'run'}")
    line = one_line_error(result)
    assert not (tmp_path / "run").exists()
    assert [path.name for path in tmp_path.iterdir()] == ["release"]  # no temporary left
    return line


def test_a_truncated_model_is_an_error_naming_it(release, tmp_path):
    folder = copied_release(release, tmp_path)
    model = folder / "model.npz"
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    line = failed_import(folder, tmp_path)
    assert f"{model} is not a readable Marian model" in line


def test_a_model_file_of_another_kind_is_named_without_numpys_pickle_advice(release, tmp_path):
    """NumPy reads a file that is no zip as a pickle, and its message advises allow_pickle."""
    folder = copied_release(release, tmp_path)
    model = folder / "model.npz"
    model.write_text("a text file\n")
    assert failed_import(folder, tmp_path) == (
        f"error: {model} is not a readable Marian model (.npz): not a zip archive, which an .npz "
        f"is.")


def test_a_model_dir_that_is_no_release_folder_is_named(tmp_path):
    """Not the OS's "[Errno 20] Not a directory" of decoder.yml below a file."""
    text_file = tmp_path / "notes.txt"
    text_file.write_text("a file\n")
    (tmp_path / "no_yml").mkdir()
    (tmp_path / "no_yml" / "decoder.yml").mkdir()
    for model_dir, state in [(text_file, "is not a folder"), (tmp_path / "nope", "does not exist")]:
        line = one_line_error(import_model("--format=opus_mt", f"--model_dir={model_dir}",
                                           f"--output_dir={tmp_path / 'run'}"))
        assert line == (f"error: {model_dir} {state}; name an OPUS-MT release folder (its "
                        f"decoder.yml, model, vocabularies, source.spm and target.spm).")
    line = one_line_error(import_model("--format=opus_mt", f"--model_dir={tmp_path / 'no_yml'}",
                                       f"--output_dir={tmp_path / 'run'}"))
    assert line.startswith(f"error: {tmp_path / 'no_yml' / 'decoder.yml'} is missing (or not a "
                           f"file)")
    assert not (tmp_path / "run").exists()


def test_a_decoder_yml_that_is_no_yaml_is_a_one_line_error_naming_it(release, tmp_path):
    """The YAML parser's message, which spans lines, is reported on one."""
    folder = copied_release(release, tmp_path)
    (folder / "decoder.yml").write_text("models: [model.npz\n")
    line = failed_import(folder, tmp_path)
    assert line.startswith(f"error: {folder / 'decoder.yml'} does not name the model and the "
                           f"vocabularies")
    assert f'in "{folder / "decoder.yml"}", line 2' in line


@pytest.mark.parametrize("text, fault", [
    ("models:\nvocabs: [vocab.yml, vocab.yml]\n", "its 'models' is None"),
    ("models: [model.npz]\nvocabs: vocab.yml\n",
     "names 1 models and 1 vocabularies; this import takes one model"),
    ("models: [model.npz]\nvocabs: [vocab.yml, 3]\n", "its 'vocabs' is ['vocab.yml', 3]"),
    ("models: {model: model.npz}\nvocabs: [vocab.yml, vocab.yml]\n",
     "its 'models' is {'model': 'model.npz'}"),
    ("- model.npz\n", "its 'models' is None"),
    ("", "its 'models' is None"),
    ("models:\n- 42\nvocabs: [vocab.yml, vocab.yml]\n", "its 'models' is [42]"),
    (b"\xff\xfe models", "(keys 'models' and 'vocabs'): 'utf-8' codec can't decode byte 0xff"),
])
def test_a_decoder_yml_without_a_list_of_files_is_a_one_line_error_naming_the_key(
        release, tmp_path, text, fault):
    """Not "names 9 models" for `models: model.npz` read letter by letter, nor a TypeError."""
    folder = copied_release(release, tmp_path)
    if isinstance(text, bytes):
        (folder / "decoder.yml").write_bytes(text)
    else:
        (folder / "decoder.yml").write_text(text)
    line = failed_import(folder, tmp_path)
    assert line.startswith(f"error: {folder / 'decoder.yml'} ")
    assert fault in line


def test_a_decoder_yml_naming_its_model_alone_imports_it(release, tmp_path):
    """`models: model.npz`, one name without a list, is the list of that one model."""
    folder = copied_release(release, tmp_path)
    (folder / "decoder.yml").write_text("models: model.npz\nvocabs: [vocab.yml, vocab.yml]\n")
    assert opus_mt_files(str(folder)).model == str(folder / "model.npz")


def test_a_missing_vocabulary_is_an_error_naming_it(release, tmp_path):
    folder = copied_release(release, tmp_path)
    (folder / "vocab.yml").unlink()
    assert f"{folder / 'vocab.yml'} is missing" in failed_import(folder, tmp_path)


def test_flags_the_format_does_not_read_are_an_error_naming_them(release, tmp_path):
    result = import_model("--format=opus_mt", f"--model_dir={release}",
                          f"--output_dir={tmp_path / 'run'}", "--vocab_file=vocab.subwords",
                          f"--tmp_dir={tmp_path}", "--data_hparams=vocab_size=8000", "--download")
    line = one_line_error(result)
    assert "--vocab_file, --tmp_dir, --data_hparams, --download do not apply to " \
           "--format=opus_mt" in line
    assert not (tmp_path / "run").exists()


def test_a_language_code_bleu_would_not_recognise_is_an_error_before_anything_is_read(
        tmp_path):
    result = run_module("t2t_repro.import_model", "--source_language=de",
                        "--target_language=en-US", "--format=opus_mt",
                        f"--model_dir={tmp_path / 'absent'}", f"--output_dir={tmp_path / 'run'}")
    assert one_line_error(result) == (
        "error: --target_language='en-US' must be a language's ISO 639 code in lower case, "
        "e.g. de (zh, not ZH or zh-CN), which BLEU's tokenizers follow.")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("option, value", [
    ("type", "amun"), ("transformer-decoder-autoreg", "rnn"),
    ("transformer-postprocess-emb", "dn"), ("transformer-postprocess", "da"),
    ("transformer-ffn-activation", "tanh")])
def test_an_option_the_model_cannot_compute_is_an_error_naming_it(release, tmp_path, option,
                                                                  value):
    folder = copied_release(release, tmp_path)
    model = folder / "model.npz"
    with np.load(model) as arrays:
        weights = dict(arrays)
    config = yaml.safe_load(model_yml(MODELS[list(MODELS)[0]]))
    config[option] = value
    weights["special:model.yml"] = np.frombuffer(yaml.safe_dump(config).encode() + b"\0",
                                                 np.int8)
    np.savez(model, **weights)
    line = failed_import(folder, tmp_path)
    assert f"{model}: Marian option --{option}={value!r} is not supported" in line
