"""translate_text_files: a language pair from files named in --data_hparams, with no code.

Multi30k German->English (a direction no built-in problem has) from files under names of our
own, through datagen, training, decoding, BLEU and export, with one shared vocabulary and with
one SentencePiece model per side (checked against sentencepiece itself, our beam search and
CTranslate2 on the same weights); cleaning counts on planted bad lines against counts worked
out here in plain Python; mismatched files and vocabularies as one-line errors.
"""

import json
import pathlib
import shutil

import h5py
import numpy as np
import pytest
import sentencepiece
from conftest import one_line_error, output_lines, run_module
from sentencepiece import sentencepiece_model_pb2

from t2t_repro.names import EOS_ID

SPLIT_LINES = 300  # per training file; two files
EVAL_LINES, TEST_LINES = 50, 16
SMALL = "vocab_size=500,num_train_shards=2"
DECODE_HPARAMS = "--decode_hparams=beam_size=2,alpha=0.6,extra_length=5"


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def read_lines(path):
    return pathlib.Path(path).read_text(encoding="utf-8").splitlines()


def data_hparams(folder, *extra, train="part-*"):
    """--data_hparams for German->English from `folder`'s files, plus `extra` items."""
    files = (f"train_source={folder}/{train}.de,train_target={folder}/{train}.en,"
             f"eval_source={folder}/dev.de,eval_target={folder}/dev.en")
    return ",".join([files, "source_language=de,target_language=en", SMALL, *extra])


def dropped(hparams, *names):
    """The --data_hparams string `hparams` without the items named `names`."""
    return ",".join(item for item in hparams.split(",") if item.partition("=")[0] not in names)


def datagen(data_dir, hparams):
    return run_module("t2t_repro.datagen", "--problem=translate_text_files",
                      f"--data_dir={data_dir}", f"--data_hparams={hparams}")


@pytest.fixture(scope="module")
def multi30k(shared_data_dir):
    folder = shared_data_dir / "multi30k_ende"
    return {name: read_lines(folder / name) for name in (
        "train.de", "train.en", "val.de", "val.en", "test_2016_flickr.de",
        "test_2016_flickr.en")}


@pytest.fixture(scope="module")
def corpus(multi30k, tmp_path_factory):
    """Multi30k as part-1/part-2 (training), dev (eval) and test files in a folder."""
    folder = tmp_path_factory.mktemp("corpus")
    for side in ("de", "en"):
        train = multi30k[f"train.{side}"]
        write_lines(folder / f"part-1.{side}", train[:SPLIT_LINES])
        write_lines(folder / f"part-2.{side}", train[SPLIT_LINES:2 * SPLIT_LINES])
        write_lines(folder / f"dev.{side}", multi30k[f"val.{side}"][:EVAL_LINES])
        write_lines(folder / f"test.{side}", multi30k[f"test_2016_flickr.{side}"][:TEST_LINES])
    return folder


# --- German->English end to end ---------------------------------------------------------------


@pytest.fixture(scope="module")
def deen_run(corpus, tmp_path_factory):
    """Data generated from `corpus`, then transformer_tiny trained 30 steps on it."""
    root = tmp_path_factory.mktemp("deen")
    generated = generate_and_train(root, data_hparams(corpus))
    return {"data": root / "data", "run": root / "run", "datagen": generated.stdout}


def generate_and_train(root, hparams):
    """Datagen into `root`/data with the data hparams `hparams`, then transformer_tiny trained
    30 steps into `root`/run (one layer: what these tests check does not depend on depth);
    returns datagen's result."""
    generated = datagen(root / "data", hparams)
    assert generated.returncode == 0, generated.stderr
    trained = run_module(
        "t2t_repro.trainer", "--problem=translate_text_files", f"--data_dir={root / 'data'}",
        f"--output_dir={root / 'run'}", "--hparams_set=transformer_tiny",
        "--hparams=batch_size=1024,max_length=128,num_hidden_layers=1", "--train_steps=30",
        "--schedule=train", "--random_seed=1")
    assert trained.returncode == 0, trained.stderr
    return generated


def test_an_existing_file_whose_name_looks_like_a_pattern_is_that_file(tmp_path):
    """`train[1].en` as a glob matches `train1.en`, another corpus; an existing file is read as
    named, and patterns still match as globs."""
    from problems.translate_text_files import matched_files

    bracketed, plain = tmp_path / "train[1].en", tmp_path / "train1.en"
    for path in (bracketed, plain):
        write_lines(path, ["a"])
    assert matched_files("train_source", str(bracketed)) == [str(bracketed)]
    assert matched_files("train_source", str(tmp_path / "train?.en")) == [str(plain)]
    assert matched_files("train_source", str(tmp_path / "train*.en")) == sorted(
        [str(bracketed), str(plain)])


def test_an_eval_split_of_blank_lines_is_refused_with_its_counts_before_the_training_shards(
        corpus, tmp_path):
    for side in ("de", "en"):
        write_lines(tmp_path / f"blank.{side}", ["", " ", ""])
    hparams = data_hparams(corpus).replace(f"{corpus}/dev.", f"{tmp_path}/blank.")
    result = datagen(tmp_path / "data", hparams)
    line = one_line_error(result)
    assert line.startswith("error: translate_text_files: the eval split has no examples (")
    assert "3 lines, 0 kept, 3 dropped as empty" in line
    assert "translate_text_files train:" not in result.stdout  # found before that work
    assert not list((tmp_path / "data").glob("*train*"))
    assert not (tmp_path / "data" / "translate_text_files.datagen.json").exists()


def test_one_file_as_both_sides_is_refused_naming_it(tmp_path):
    """A tab-separated corpus given as both sides trained a copy task of whole lines."""
    from problems.translate_text_files import paired_files
    from t2t_repro.data.raw_text import RawDataError

    corpus = write_lines(tmp_path / "corpus.tsv", ["ein Hund\ta dog"])
    with pytest.raises(RawDataError) as raised:
        paired_files("train_source", str(corpus), "train_target", str(tmp_path / "*.tsv"))
    assert str(raised.value) == (
        f"train_source={corpus} and train_target={tmp_path / '*.tsv'} both name {corpus}; give "
        f"each side's file (a tab-separated corpus: split its columns into two files, e.g. with "
        f"cut -f1 and cut -f2).")


def test_datagen_reads_every_file_the_patterns_match(deen_run):
    metadata = json.loads((deen_run["data"] / "translate_text_files.datagen.json").read_text())
    assert metadata["splits"]["train"]["examples"] == 2 * SPLIT_LINES
    assert metadata["splits"]["eval"]["examples"] == EVAL_LINES
    assert metadata["data_hparams"]["source_language"] == "de"
    assert metadata["data_hparams"]["target_language"] == "en"
    assert "part-1.de" in deen_run["datagen"] and "part-2.de" in deen_run["datagen"]


def train_briefly(data_dir, output_dir):
    return run_module("t2t_repro.trainer", "--problem=translate_text_files",
                      f"--data_dir={data_dir}", f"--output_dir={output_dir}",
                      "--hparams_set=transformer_tiny", "--train_steps=1")


SHARDS = [f"translate_text_files-train-0000{index}-of-00002.tfrecord" for index in (0, 1)]


@pytest.mark.parametrize("names, gone", [
    (SHARDS[1:], "{data}/" + SHARDS[1] + " (the train examples) is gone since datagen wrote it. "
                 "Restore it"),
    (SHARDS, "{data}/" + SHARDS[0] + " and 1 more (the train examples) are gone since datagen "
             "wrote them. Restore them"),
    (["translate_text_files-eval-00000-of-00001.tfrecord"],
     "{data}/translate_text_files-eval-00000-of-00001.tfrecord (the eval examples) is gone since "
     "datagen wrote it. Restore it"),
    (["translate_text_files.spm.model"], "{data}/translate_text_files.spm.model (the vocabulary) "
                                         "is gone since datagen wrote it. Restore it"),
])
def test_a_data_file_gone_after_datagen_is_an_error_naming_it(deen_run, corpus, tmp_path, names,
                                                              gone):
    """datagen said "nothing to do" over the gap and the trainer stopped in TensorFlow's
    NotFoundError traceback (or, without the vocabulary, "[Errno 2] No such file")."""
    data = tmp_path / "data"
    shutil.copytree(deen_run["data"], data)
    for name in names:
        (data / name).unlink()
    expected = (f"error: the translate_text_files data in {data} is incomplete: "
                f"{gone.format(data=data)} from a copy, or generate the data again into a new "
                f"--data_dir.")
    assert one_line_error(datagen(data, data_hparams(corpus))) == expected
    assert one_line_error(train_briefly(data, tmp_path / "run")) == expected
    assert not (tmp_path / "run").exists()


def test_a_datagen_record_cut_short_is_an_error_naming_it(deen_run, corpus, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(deen_run["data"], data)
    record = data / "translate_text_files.datagen.json"
    record.write_text(record.read_text()[:40])
    for result in (datagen(data, data_hparams(corpus)), train_briefly(data, tmp_path / "run")):
        line = one_line_error(result)
        assert line.startswith(f"error: {record} is not datagen's record of the "
                               f"translate_text_files data (")
        assert line.endswith("); restore it from a copy, or generate the data again into a new "
                             "--data_dir.")
    assert not (tmp_path / "run").exists()


def test_decoding_scores_with_the_english_tokenized_bleu(deen_run, corpus, tmp_path):
    """The decoder (given only the run) and the BLEU command agree; the tokenized BLEU is
    Moses' English tokenizer without the German compound split."""
    decoded = run_module("t2t_repro.decoder", f"--output_dir={deen_run['run']}", DECODE_HPARAMS,
                         f"--decode_from_file={corpus / 'test.de'}",
                         f"--decode_to_file={tmp_path / 'test.out.en'}",
                         f"--decode_reference={corpus / 'test.en'}")
    assert decoded.returncode == 0, decoded.stderr
    assert len(read_lines(tmp_path / "test.out.en")) == TEST_LINES
    scored = run_module("t2t_repro.bleu", f"--translation={tmp_path / 'test.out.en'}",
                        f"--reference={corpus / 'test.en'}", "--language=en")
    assert scored.returncode == 0, scored.stderr
    report = output_lines(scored.stdout)
    assert "Moses tokenizer.perl -l en, multi-bleu.perl" in report[1]
    assert all(line in decoded.stdout + decoded.stderr for line in report)


def test_the_export_answers_as_the_decoder(deen_run, corpus, export_runner):
    """The SavedModel, in a process of TensorFlow alone, gives the decoder's outputs."""
    exported = run_module("t2t_repro.exporter", f"--output_dir={deen_run['run']}", DECODE_HPARAMS)
    assert exported.returncode == 0, exported.stderr
    decoded = run_module("t2t_repro.decoder", f"--output_dir={deen_run['run']}", DECODE_HPARAMS,
                         f"--decode_from_file={corpus / 'test.de'}")
    assert decoded.returncode == 0, decoded.stderr
    answers = export_runner(deen_run["run"] / "export" / "30", read_lines(corpus / "test.de"))
    assert answers["signatures"]["serving_default"]["outputs"] == output_lines(decoded.stdout)
    assert answers["project_modules"] == []


# --- Fine-tuning on another corpus ------------------------------------------------------------


FINE_TUNING_HPARAMS = "batch_size=1024,max_length=128,learning_rate_constant=0.5," \
    "num_hidden_layers=1"


def fine_tune(deen_run, data_dir, output_dir, source=None):
    """Two steps from `source` (default: the run's newest checkpoint)."""
    return run_module(
        "t2t_repro.trainer", "--problem=translate_text_files", f"--data_dir={data_dir}",
        f"--output_dir={output_dir}", "--hparams_set=transformer_tiny",
        f"--hparams={FINE_TUNING_HPARAMS}", "--train_steps=2", "--schedule=train",
        f"--warm_start_from={source or deen_run['run']}")


def test_a_source_run_whose_ids_are_its_symbols_is_refused_naming_both_problems(deen_run,
                                                                                 tmp_path):
    """algorithmic_copy's ids are its digits, a corpus run's its vocabulary's pieces; the
    message said only that one vocabulary file is not the other's none."""
    source = tmp_path / "copy"
    trained = run_module(
        "t2t_repro.trainer", "--problem=algorithmic_copy", f"--output_dir={source}",
        "--hparams_set=transformer_tiny",
        "--hparams=batch_size=1024,max_length=128,num_hidden_layers=1", "--train_steps=1",
        "--save_checkpoints_steps=1", "--schedule=train")
    assert trained.returncode == 0, trained.stderr
    line = one_line_error(fine_tune(deen_run, deen_run["data"], tmp_path / "run",
                                    source=source))
    assert line == (
        f"error: --warm_start_from={source / 'ckpt-1.weights.h5'} was trained on "
        f"algorithmic_copy, whose ids are its own symbols; this run is translate_text_files, "
        f"whose ids are its vocabulary {deen_run['data'] / 'translate_text_files.spm.model'}. "
        f"The ids mean different things: start from a run encoded with this run's vocabulary.")
    assert not (tmp_path / "run").exists()


def copied_out(checkpoint, folder):
    """A copy of `checkpoint` alone in `folder`, outside any run."""
    folder.mkdir()
    shutil.copy(checkpoint, folder)
    return folder / checkpoint.name


def check_fine_tuning_source(checkpoint, data_dir):
    """What the trainer checks before fine-tuning on `data_dir` from `checkpoint`
    (`warm_start.check_source`; the trainer itself fine-tunes from a copied checkpoint in
    tests/test_warm_start.py)."""
    from t2t_repro import registry
    from t2t_repro.hparams import create_hparams
    from t2t_repro.training import warm_start

    registry.import_all()
    problem = registry.problems["translate_text_files"](data_dir=str(data_dir))
    problem.check_data()
    warm_start.check_source(str(checkpoint), problem,
                            create_hparams("transformer_tiny", FINE_TUNING_HPARAMS))


def test_fine_tuning_on_another_corpus_encoded_with_the_runs_vocabulary(deen_run, corpus,
                                                                       tmp_path):
    vocabulary = deen_run["data"] / "translate_text_files.spm.model"
    generated = datagen(tmp_path / "data", dropped(data_hparams(
        corpus, f"vocabulary={vocabulary}", train="part-2"), "vocab_size"))
    assert generated.returncode == 0, generated.stderr
    assert (tmp_path / "data" / "translate_text_files.spm.model").read_bytes() == \
        vocabulary.read_bytes()
    tuned = fine_tune(deen_run, tmp_path / "data", tmp_path / "run")
    assert tuned.returncode == 0, tuned.stderr
    assert f"Warm-started from {deen_run['run'] / 'ckpt-30.weights.h5'}" in tuned.stdout
    assert (tmp_path / "run" / "ckpt-2.weights.h5").is_file()
    # Outside its run, the checkpoint's stored vocabulary digests match these files.
    check_fine_tuning_source(copied_out(deen_run["run"] / "ckpt-30.weights.h5",
                                        tmp_path / "copied"), tmp_path / "data")


def test_another_vocabulary_is_an_error_naming_both_files(deen_run, corpus, tmp_path):
    """Fine-tuning names both files; fine-tuning from or decoding a checkpoint copied out of
    the run, which only the digests stored in it tie to its vocabulary, names the file it is
    not (a vocabulary of the same size: without the check it decodes other text without a
    word); without the digests, what it was trained on is unknown."""
    generated = datagen(tmp_path / "data", data_hparams(corpus, train="part-2"))
    assert generated.returncode == 0, generated.stderr
    line = one_line_error(fine_tune(deen_run, tmp_path / "data", tmp_path / "run"))
    other = tmp_path / "data" / "translate_text_files.spm.model"
    assert str(other) in line
    assert str(deen_run["data"] / "translate_text_files.spm.model") in line
    assert line.endswith("fine-tune on data encoded with it (translate_text_files' data hparam "
                         "vocabulary=<its file>, or source_vocabulary= and target_vocabulary=, "
                         "in a new --data_dir).")
    assert not (tmp_path / "run").exists()
    # That advice followed in the data folder just written: its vocabulary was trained there.
    own = deen_run["data"] / "translate_text_files.spm.model"
    line = one_line_error(datagen(tmp_path / "data", data_hparams(corpus, f"vocabulary={own}",
                                                                  train="part-2")))
    assert f"(vocabulary={own} asked, unset there)" in line
    copied = copied_out(deen_run["run"] / "ckpt-30.weights.h5", tmp_path / "copied")
    decoded = run_module("t2t_repro.decoder", "--problem=translate_text_files",
                         f"--data_dir={tmp_path / 'data'}", f"--checkpoint_path={copied}",
                         input="Ein Mann .\n")
    assert decoded.returncode == 1 and "Traceback" not in decoded.stderr, decoded.stderr
    assert decoded.stderr.splitlines()[-1].startswith(
        f"error: {copied} was trained with another source vocabulary than {other} (SHA-256 ")
    assert "Decoding with" not in decoded.stderr
    line = one_line_error(fine_tune(deen_run, tmp_path / "data", tmp_path / "run",
                                    source=copied))
    assert line.startswith(f"error: --warm_start_from={copied} was trained with another source "
                           f"vocabulary than {other} (SHA-256 ")
    with h5py.File(copied, "r+") as weights:
        del weights.attrs["t2t_repro_vocabularies"]
    line = one_line_error(fine_tune(deen_run, tmp_path / "data", tmp_path / "run",
                                    source=copied))
    assert line.startswith(f"error: no hparams.json beside {copied} or in the folder above it, "
                           f"and the checkpoint holds no vocabulary digests")
    assert not (tmp_path / "run").exists()


def test_a_vocabulary_that_is_no_sentencepiece_model_is_an_error_naming_it(corpus, tmp_path):
    not_a_model = write_lines(tmp_path / "vocab.txt", ["a", "b"])
    result = datagen(tmp_path / "data", dropped(data_hparams(corpus, f"vocabulary={not_a_model}"),
                                                "vocab_size"))
    assert f"vocabulary={not_a_model} is not a SentencePiece model" in one_line_error(result)
    empty = tmp_path / "empty.model"
    empty.write_bytes(b"")
    result = datagen(tmp_path / "data", dropped(data_hparams(corpus, f"vocabulary={empty}"),
                                                "vocab_size"))
    assert one_line_error(result) == (
        f"error: vocabulary={empty} is not a SentencePiece model this can read ({empty} is not a "
        f"readable SentencePiece model (the file is empty)); name a run's "
        f"<data_dir>/translate_text_files.spm.model.")
    assert not (tmp_path / "data").exists()


def test_a_sentencepiece_model_with_other_special_ids_is_an_error_saying_how_to_train_one(
        corpus, tmp_path):
    """sentencepiece's defaults (<unk> 0, <s> 1, </s> 2, no padding) would put padding and EOS
    ids inside the encoded data, silently."""
    prefix = tmp_path / "defaults"
    sentencepiece.SentencePieceTrainer.train(
        input=str(corpus / "part-1.en"), model_prefix=str(prefix), vocab_size=200,
        minloglevel=2)
    model = f"{prefix}.model"
    result = datagen(tmp_path / "data", dropped(data_hparams(corpus, f"vocabulary={model}"),
                                                "vocab_size"))
    assert one_line_error(result) == (
        f"error: vocabulary={model} is not a SentencePiece model this can read ({model} puts "
        f"padding at id -1 and EOS at id 2 (sentencepiece's defaults: no padding, EOS at 2), "
        f"where this project's vocabularies have 0 and 1: train it with pad_id=0, eos_id=1, "
        f"unk_id=2, bos_id=-1); name a run's <data_dir>/translate_text_files.spm.model.")
    assert not (tmp_path / "data").exists()


# --- Separate source and target vocabularies -------------------------------------------------


SOURCE_PIECES, TARGET_PIECES = 420, 340
SEPARATE = f"shared_vocabulary=false,source_vocab_size={SOURCE_PIECES}," \
    f"target_vocab_size={TARGET_PIECES}"


def spm(path):
    return sentencepiece.SentencePieceProcessor(model_file=str(path))


@pytest.fixture(scope="module")
def separate_run(corpus, tmp_path_factory):
    """Data with one SentencePiece model per side, then transformer_tiny trained 30 steps."""
    root = tmp_path_factory.mktemp("separate")
    generate_and_train(root, data_hparams(corpus, SEPARATE))
    data = root / "data"
    return {"data": data, "run": root / "run",
            "source": data / "translate_text_files.source.spm.model",
            "target": data / "translate_text_files.target.spm.model"}


def trained_problem_and_model(run, step=30):
    """The run's problem (as its flags.txt names it) and model with its step's weights."""
    from t2t_repro import hparams as hparams_lib
    from t2t_repro import registry
    from t2t_repro.training.run import load_trained_model
    from t2t_repro.training.run_records import recorded_flags

    flags = recorded_flags(run)
    problem = registry.problems[flags["problem"]](data_dir=flags["data_dir"])
    model = load_trained_model("transformer", hparams_lib.load(run), problem,
                               str(run / f"ckpt-{step}.weights.h5"))
    return problem, model


def test_datagen_trains_one_model_per_side_on_that_sides_text(separate_run, corpus):
    source, target = spm(separate_run["source"]), spm(separate_run["target"])
    assert (source.get_piece_size(), target.get_piece_size()) == (SOURCE_PIECES, TARGET_PIECES)
    assert not (separate_run["data"] / "translate_text_files.spm.model").exists()
    german, english = read_lines(corpus / "dev.de"), read_lines(corpus / "dev.en")

    def pieces(model, lines):
        return sum(map(len, model.encode(lines)))
    # Each model, learnt from its own side, splits its language into fewer pieces (the
    # source model is the larger, so this is not its size showing).
    assert pieces(source, german) < pieces(target, german)
    assert pieces(target, english) < pieces(source, english)
    from t2t_repro.data.token_arrays import TokenArrays

    arrays = TokenArrays.load(str(separate_run["data"] / "translate_text_files-eval"))
    for row in range(3):
        assert list(arrays[row]["inputs"]) == source.encode(german[row]) + [EOS_ID]
        assert list(arrays[row]["targets"]) == target.encode(english[row]) + [EOS_ID]


def test_the_model_has_a_source_and_a_target_embedding_of_each_vocabularys_size(separate_run):
    problem, model = trained_problem_and_model(separate_run["run"])
    hidden = model.hparams.hidden_size
    assert model.input_embedding is not model.target_embedding
    assert tuple(model.input_embedding.embeddings.shape) == (SOURCE_PIECES, hidden)
    assert tuple(model.target_embedding.embeddings.shape) == (TARGET_PIECES, hidden)
    assert model.softmax_projection is None  # the output layer is the target embedding
    assert (problem.input_vocab_size, problem.target_vocab_size) == (SOURCE_PIECES,
                                                                     TARGET_PIECES)


def test_the_jax_trainer_trains_with_separate_vocabularies_without_tensorflow(separate_run,
                                                                             tmp_path,
                                                                             monkeypatch):
    monkeypatch.syspath_prepend(str(pathlib.Path(__file__).parents[1] / "training"))
    from test_jax_training import jax_trainer

    run = tmp_path / "jax"
    trained = jax_trainer("--problem=translate_text_files", f"--data_dir={separate_run['data']}",
                          f"--output_dir={run}", "--hparams_set=transformer_tiny",
                          "--hparams=batch_size=1024,max_length=128,num_hidden_layers=1",
                          "--train_steps=3", "--schedule=train", "--random_seed=1")
    assert trained.returncode == 0, trained.stderr[-3000:]
    _, model = trained_problem_and_model(run, step=3)
    hidden = model.hparams.hidden_size
    assert tuple(model.input_embedding.embeddings.shape) == (SOURCE_PIECES, hidden)
    assert tuple(model.target_embedding.embeddings.shape) == (TARGET_PIECES, hidden)


def greedy_ids(model, id_lists, extra_length=5):
    """Our beam search with one beam on `id_lists`: each best hypothesis's ids, EOS kept."""
    from t2t_repro.decoding.transformer_search import TransformerBeamSearch

    width = max(map(len, id_lists))
    sources = np.array([ids + [0] * (width - len(ids)) for ids in id_lists], np.int32)
    lengths = np.array([len(ids) + extra_length for ids in id_lists])
    best = TransformerBeamSearch(model, beam_size=1, alpha=0.0)(sources, lengths).best()
    return [[int(i) for i in row if i != 0] for row in best]


def test_decoding_reads_the_source_model_and_writes_through_the_target_one(separate_run, corpus,
                                                                          tmp_path):
    """And it writes no output over either model."""
    german = read_lines(corpus / "test.de")
    decoded = run_module("t2t_repro.decoder", f"--output_dir={separate_run['run']}",
                         "--decode_hparams=beam_size=1,extra_length=5",
                         f"--decode_from_file={corpus / 'test.de'}",
                         f"--decode_to_file={tmp_path / 'out.en'}",
                         f"--decode_reference={corpus / 'test.en'}")
    assert decoded.returncode == 0, decoded.stderr
    assert "BLEU" in decoded.stdout + decoded.stderr
    for side in ("source", "target"):  # what the decoder reads is never its output
        vocabulary = separate_run[side]
        before = vocabulary.read_bytes()
        onto_it = run_module("t2t_repro.decoder", f"--output_dir={separate_run['run']}",
                             f"--decode_from_file={corpus / 'test.de'}",
                             f"--decode_to_file={vocabulary}")
        assert onto_it.returncode == 1 and onto_it.stderr.splitlines()[-1] == (
            f"error: --decode_to_file={vocabulary} is the {side} vocabulary file; writing it "
            f"would replace it. Name another output file.")
        assert vocabulary.read_bytes() == before
    source, target = spm(separate_run["source"]), spm(separate_run["target"])
    _, model = trained_problem_and_model(separate_run["run"])
    outputs = greedy_ids(model, [source.encode(line) + [EOS_ID] for line in german])
    expected = [target.decode([i for i in ids if i != EOS_ID]) for ids in outputs]
    assert read_lines(tmp_path / "out.en") == expected
    # Its checkpoint alone, loaded with the set and overrides the run was trained with: the
    # model the separate vocabularies make of them is the one stored in the checkpoint.
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(separate_run["run"] / "ckpt-30.weights.h5", alone)
    decoded_alone = run_module(
        "t2t_repro.decoder", "--problem=translate_text_files",
        f"--data_dir={separate_run['data']}", f"--output_dir={alone}",
        "--hparams_set=transformer_tiny",
        "--hparams=batch_size=1024,max_length=128,num_hidden_layers=1",
        "--decode_hparams=beam_size=1,extra_length=5", f"--decode_from_file={corpus / 'test.de'}",
        f"--decode_to_file={tmp_path / 'alone.en'}")
    assert decoded_alone.returncode == 0, decoded_alone.stderr
    assert read_lines(tmp_path / "alone.en") == expected
    assert any(expected) and expected != [source.decode([i for i in ids if i != EOS_ID])
                                          for ids in outputs]


def test_the_export_holds_both_models_and_answers_as_the_decoder(separate_run, corpus,
                                                                 export_runner):
    exported = run_module("t2t_repro.exporter", f"--output_dir={separate_run['run']}",
                          DECODE_HPARAMS)
    assert exported.returncode == 0, exported.stderr
    version = separate_run["run"] / "export" / "30"
    assets = sorted(path.name for path in (version / "assets").iterdir())
    assert assets == ["translate_text_files.source.spm.model",
                      "translate_text_files.target.spm.model"]
    decoded = run_module("t2t_repro.decoder", f"--output_dir={separate_run['run']}",
                         DECODE_HPARAMS, f"--decode_from_file={corpus / 'test.de'}")
    assert decoded.returncode == 0, decoded.stderr
    answers = export_runner(version, read_lines(corpus / "test.de"))
    assert answers["signatures"]["serving_default"]["outputs"] == output_lines(decoded.stdout)
    assert answers["project_modules"] == []
    info = json.loads((version / "assets.extra" / "export_info.json").read_text())
    assert info["hparams"]["shared_source_target_embedding"] is False  # the model's, not the set's


def test_the_ctranslate2_conversion_decodes_as_our_search_id_for_id(separate_run, corpus):
    ctranslate2 = pytest.importorskip("ctranslate2")
    converted = run_module("t2t_repro.exporter", "--export_format=ctranslate2",
                           f"--output_dir={separate_run['run']}")
    assert converted.returncode == 0, converted.stderr
    ct2_dir = separate_run["run"] / "ctranslate2" / "30"
    assert (ct2_dir / "source.spm.model").read_bytes() == separate_run["source"].read_bytes()
    assert (ct2_dir / "target.spm.model").read_bytes() == separate_run["target"].read_bytes()
    info = json.loads((ct2_dir / "t2t_repro_info.json").read_text())
    assert info["hparams"]["shared_source_target_embedding"] is False
    source, target = spm(ct2_dir / "source.spm.model"), spm(ct2_dir / "target.spm.model")
    german = read_lines(corpus / "test.de")
    translator = ctranslate2.Translator(str(ct2_dir), device="cpu")
    results = translator.translate_batch(
        [source.encode(line, out_type=str) + ["</s>"] for line in german], beam_size=1,
        max_decoding_length=max(len(source.encode(line)) for line in german) + 6)
    _, model = trained_problem_and_model(separate_run["run"])
    ours = greedy_ids(model, [source.encode(line) + [EOS_ID] for line in german],
                      extra_length=5)
    theirs = [[target.piece_to_id(piece) for piece in result.hypotheses[0]]
              for result in results]
    # CTranslate2 leaves the EOS out. Its length limit is the batch's, ours each sentence's:
    # where ours stopped at its limit, CTranslate2's goes on from the same ids.
    agreeing = [their == our[:-1] if our[-1] == EOS_ID else their[:len(our)] == our
                for our, their in zip(ours, theirs)]
    assert sum(agreeing) == len(german), agreeing


def test_warm_starting_from_another_target_vocabulary_is_an_error_naming_both(separate_run,
                                                                             corpus, tmp_path):
    hparams = dropped(data_hparams(corpus, SEPARATE, f"source_vocabulary={separate_run['source']}",
                                   train="part-2"), "vocab_size", "source_vocab_size").replace(
        f"target_vocab_size={TARGET_PIECES}", "target_vocab_size=330")
    generated = datagen(tmp_path / "data", hparams)
    assert generated.returncode == 0, generated.stderr
    assert (tmp_path / "data" / "translate_text_files.source.spm.model").read_bytes() == \
        separate_run["source"].read_bytes()
    line = one_line_error(fine_tune(separate_run, tmp_path / "data", tmp_path / "run"))
    assert str(tmp_path / "data" / "translate_text_files.target.spm.model") in line
    assert str(separate_run["target"]) in line
    assert not (tmp_path / "run").exists()


def test_fine_tuning_with_both_vocabularies_given(separate_run, corpus, tmp_path):
    hparams = dropped(data_hparams(corpus, SEPARATE, f"source_vocabulary={separate_run['source']}",
                                   f"target_vocabulary={separate_run['target']}", train="part-2"),
                      "vocab_size", "source_vocab_size", "target_vocab_size")
    generated = datagen(tmp_path / "data", hparams)
    assert generated.returncode == 0, generated.stderr
    tuned = fine_tune(separate_run, tmp_path / "data", tmp_path / "run")
    assert tuned.returncode == 0, tuned.stderr
    assert (tmp_path / "run" / "ckpt-2.weights.h5").is_file()
    # Outside its run: the hparams stored in the checkpoint are its model's, whose embeddings
    # the separate vocabularies made separate, and --hparams_set's are compared as adapted.
    check_fine_tuning_source(copied_out(separate_run["run"] / "ckpt-30.weights.h5",
                                        tmp_path / "copied"), tmp_path / "data")


def test_a_size_asked_of_given_vocabularies_is_an_error_naming_them(deen_run, separate_run,
                                                                     corpus, tmp_path):
    """The given model keeps its own size: vocab_size=500 beside vocabulary= was ignored while
    datagen.json recorded it. A size still used by a side trained here is no error."""
    shared = deen_run["data"] / "translate_text_files.spm.model"
    source, target = separate_run["source"], separate_run["target"]
    for extra, named in [
        ((f"vocabulary={shared}",), f"vocab_size=500 sizes a vocabulary trained here, but "
                                    f"vocabulary={shared} is given, with its own size"),
        ((SEPARATE, f"source_vocabulary={source}"),
         f"source_vocab_size={SOURCE_PIECES} sizes a vocabulary trained here, but "
         f"source_vocabulary={source} is given, with its own size"),
        (("shared_vocabulary=false", f"source_vocabulary={source}",
          f"target_vocabulary={target}"),
         f"vocab_size=500 sizes a vocabulary trained here, but source_vocabulary={source} and "
         f"target_vocabulary={target} are given, with their own sizes"),
    ]:
        line = one_line_error(datagen(tmp_path / "data", data_hparams(corpus, *extra)))
        assert line == f"error: translate_text_files: {named}; drop {named.partition('=')[0]}."
        assert not (tmp_path / "data").exists()


def test_a_shared_vocabulary_hparam_with_separate_vocabularies_is_an_error(corpus, tmp_path):
    line = one_line_error(datagen(tmp_path / "data", data_hparams(
        corpus, "shared_vocabulary=false", f"vocabulary={tmp_path / 'x.model'}")))
    assert "vocabulary does not apply with shared_vocabulary=false" in line
    assert "source_vocabulary= and target_vocabulary=" in line


# --- Cleaning --------------------------------------------------------------------------------


MAX_LENGTH, MAX_RATIO = 20, 2.5


def planted_corpus(folder, multi30k):
    """Two training files of real pairs with bad ones planted (empty sides, over-long, far
    apart in length, duplicates), and a dev set with an empty and an over-long pair."""
    german, english = multi30k["train.de"][:200], multi30k["train.en"][:200]
    long_german = " ".join(german[:4])
    planted = [("", english[0]), (german[1], "  "), (long_german, english[2]),
               (german[3], " ".join(english[3:7])),
               ("Hund .", "A dog runs across the green grass ."),
               (german[7], english[7]), (german[8], english[8]), (german[7], english[7])]
    pairs = list(zip(german, english)) + planted
    halves = {"part-1": pairs[::2], "part-2": pairs[1::2]}
    for name, half in halves.items():
        write_lines(folder / f"{name}.de", [source for source, _ in half])
        write_lines(folder / f"{name}.en", [target for _, target in half])
    dev = list(zip(multi30k["val.de"][:20], multi30k["val.en"][:20])) + [
        ("", "A dog."), (long_german, english[2])]
    write_lines(folder / "dev.de", [source for source, _ in dev])
    write_lines(folder / "dev.en", [target for _, target in dev])
    return halves["part-1"] + halves["part-2"], dev


def counts_worked_out(pairs, max_length, max_ratio, deduplicate):
    """Per-rule counts of `pairs`, each counted under the first rule it breaks."""
    counts = dict.fromkeys(["empty", "max_length", "max_length_ratio", "duplicate"], 0)
    kept = []
    for source, target in pairs:
        words = sorted([len(source.split()), len(target.split())])
        if words[0] == 0:
            counts["empty"] += 1
        elif max_length and words[1] > max_length:
            counts["max_length"] += 1
        elif max_ratio and words[1] / words[0] > max_ratio:
            counts["max_length_ratio"] += 1
        elif deduplicate and (source, target) in kept:
            counts["duplicate"] += 1
        else:
            kept.append((source, target))
    return {"lines": len(pairs), **counts, "kept": len(kept)}


def test_cleaning_counts_equal_counts_worked_out_from_the_files(multi30k, tmp_path):
    train, dev = planted_corpus(tmp_path, multi30k)
    hparams = data_hparams(tmp_path, f"max_length={MAX_LENGTH}", f"max_length_ratio={MAX_RATIO}",
                           "deduplicate=true", "character_coverage=0.9995")
    result = datagen(tmp_path / "data", hparams)
    assert result.returncode == 0, result.stderr
    expected_train = counts_worked_out(train, MAX_LENGTH, MAX_RATIO, deduplicate=True)
    assert all(expected_train[rule] for rule in expected_train)  # every rule drops something
    written = json.loads((tmp_path / "data" / "translate_text_files.cleaning.json").read_text())
    assert written == {"train": expected_train,
                       "eval": counts_worked_out(dev, 0, 0, deduplicate=False)}
    rules = ", ".join(f"{expected_train[rule]} {rule}" for rule in (
        "empty", "max_length", "max_length_ratio", "duplicate"))
    assert f"dropped {rules}; {expected_train['kept']} kept" in result.stdout
    metadata = json.loads((tmp_path / "data" / "translate_text_files.datagen.json").read_text())
    assert metadata["splits"]["train"]["examples"] == expected_train["kept"]


def test_character_coverage_reaches_sentencepiece(multi30k, tmp_path):
    planted_corpus(tmp_path, multi30k)
    result = datagen(tmp_path / "data", data_hparams(tmp_path, "character_coverage=0.9995"))
    assert result.returncode == 0, result.stderr
    model = sentencepiece_model_pb2.ModelProto.FromString(
        (tmp_path / "data" / "translate_text_files.spm.model").read_bytes())
    assert model.trainer_spec.character_coverage == pytest.approx(0.9995)


# --- Errors ----------------------------------------------------------------------------------


def test_different_numbers_of_files_are_an_error_naming_them(corpus, tmp_path):
    hparams = data_hparams(corpus).replace(f"{corpus}/part-*.en", f"{corpus}/part-1.en")
    line = one_line_error(datagen(tmp_path / "data", hparams))
    assert (f"train_source={corpus}/part-*.de matches 2 files ({corpus}/part-1.de, "
            f"{corpus}/part-2.de) but train_target={corpus}/part-1.en matches 1 "
            f"({corpus}/part-1.en)") in line


def test_a_folder_named_for_a_file_is_an_error_naming_it_before_anything_is_written(
        corpus, tmp_path):
    """Not the operating system's "Is a directory" after the training split is written."""
    hparams = data_hparams(corpus).replace(f"{corpus}/dev.de", str(corpus))
    line = one_line_error(datagen(tmp_path / "data", hparams))
    assert line == (f"error: eval_source={corpus} names the folder {corpus}, not a text file; "
                    f"name a file in it, or a glob pattern of its files.")
    assert not (tmp_path / "data").exists()


def test_different_numbers_of_lines_are_an_error_naming_them(corpus, tmp_path):
    write_lines(tmp_path / "short.de", read_lines(corpus / "part-1.de")[:10])
    write_lines(tmp_path / "short.en", read_lines(corpus / "part-1.en")[:9])
    hparams = data_hparams(corpus, train="short").replace(f"{corpus}/short", f"{tmp_path}/short")
    line = one_line_error(datagen(tmp_path / "data", hparams))
    assert f"{tmp_path}/short.de has 10 lines but {tmp_path}/short.en has 9 lines" in line


def test_a_missing_file_hparam_is_an_error_naming_it(tmp_path):
    line = one_line_error(datagen(tmp_path / "data", "source_language=de,target_language=en"))
    assert "train_source, train_target, eval_source, eval_target" in line


@pytest.mark.parametrize("extra, named", [
    ("num_train_shards=0", "data hparam num_train_shards=0 must be at least 1."),
    ("vocab_sample_pairs=0", "data hparam vocab_sample_pairs=0 must be at least 1."),
    ("max_length=-1", "data hparam max_length=-1 must be at least 0 (0: no limit)."),
    # The longer side is never below `ratio` times the shorter for ratio < 1: all would go.
    ("max_length_ratio=0.5", "data hparam max_length_ratio=0.5 must be 0 (no limit) or at "
                             "least 1."),
    ("character_coverage=0.0", "data hparam character_coverage=0.0 must be above 0 and at "
                               "most 1."),
    ("shared_vocabulary=false,target_vocab_size=-8",
     "data hparam target_vocab_size=-8 must be 0 (vocab_size) or at least 260 (3 reserved ids, "
     "256 bytes and a piece)."),
    # Byte fallback alone takes 259 ids: refused before the source side's model is trained.
    ("shared_vocabulary=false,target_vocab_size=7",
     "data hparam target_vocab_size=7 must be 0 (vocab_size) or at least 260 (3 reserved ids, "
     "256 bytes and a piece)."),
    ("vocab_size=259", "data hparam vocab_size=259 must be at least 260 (3 reserved ids, 256 "
                       "bytes and a piece)."),
    ("target_vocab_size=300", "translate_text_files: target_vocab_size applies to separate "
                              "vocabularies (shared_vocabulary=false); a shared one has "
                              "vocab_size pieces."),
    ("source_vocab_size=300,target_vocab_size=300",
     "translate_text_files: source_vocab_size, target_vocab_size apply to separate vocabularies "
     "(shared_vocabulary=false); a shared one has vocab_size pieces."),
    # sacreBLEU and tokenizer.perl would treat "EN" as another language, without a word.
    ("target_language=EN", "data hparam target_language='EN' must be a language's ISO 639 "
                           "code in lower case, e.g. de (zh, not ZH or zh-CN), which BLEU's "
                           "tokenizers follow."),
])
def test_a_data_hparam_out_of_its_range_is_an_error_that_writes_nothing(corpus, tmp_path, extra,
                                                                       named):
    hparams = data_hparams(corpus, extra)
    if extra.startswith("num_train_shards="):  # SMALL sets it: replaced, not given twice
        hparams = data_hparams(corpus).replace("num_train_shards=2", extra)
    if extra.startswith("vocab_size="):  # likewise
        hparams = data_hparams(corpus).replace("vocab_size=500", extra)
    if extra.startswith("target_language="):  # likewise
        hparams = data_hparams(corpus).replace("target_language=en", extra)
    line = one_line_error(datagen(tmp_path / "data", hparams))
    assert line == f"error: {named}"
    assert not (tmp_path / "data").exists()


def test_rules_that_drop_every_training_pair_are_an_error_naming_their_counts(corpus, tmp_path):
    """Not sentencepiece's complaint about training on no sentences."""
    line = one_line_error(datagen(tmp_path / "data", data_hparams(corpus, "max_length=1")))
    pairs = len(read_lines(corpus / "part-1.de")) + len(read_lines(corpus / "part-2.de"))
    assert line.startswith("error: translate_text_files: no training pair is left to learn a "
                           "vocabulary from")
    assert f"cleaning: {pairs} pairs, dropped 0 empty, {pairs} max_length" in line
    assert line.endswith("loosen the rules that dropped the pairs.")
    assert not (tmp_path / "data").exists()
