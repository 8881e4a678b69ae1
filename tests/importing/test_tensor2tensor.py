"""tensor2tensor transformer checkpoints imported as runs compute what tensor2tensor's
equations compute: checkpoints written here under tensor2tensor's exact variable names and
shapes (random values, the embedding in row shards, post-norm transformer_base_v1 and pre-norm
current transformer_base) give logits equal to a NumPy forward pass written from
tensor2tensor's code (independent of our Keras model) within 1e-5. The SubwordTextEncoder
vocabulary encodes and decodes as tensor2tensor's does. The imported run decodes as the NumPy
pass does greedily, and fine-tunes on a corpus encoded with its vocabulary on both backends.
Another model's checkpoint, a missing vocabulary and vocabularies of two formats are one-line
errors naming the file, with nothing written."""

import json
import math
import os

import numpy as np
import pytest

from conftest import one_line_error, output_lines, run_module
from importing.tensor2tensor_checkpoints import (
    D,
    HEADS,
    SHARDS,
    SUBTOKENS,
    VOCAB,
    t2t_variables,
    write_checkpoint,
    write_vocabulary,
)

VARIANTS = {"post-norm transformer_base_v1": (False, (2, 1)),
            "pre-norm transformer_base": (True, (1, 2))}


# The NumPy forward pass, from tensor2tensor's code.
def layer_norm(x, variables, scope):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    scale = variables[f"{scope}/layer_norm/layer_norm_scale"]
    return (x - mean) / np.sqrt(variance + 1e-6) * scale + variables[
        f"{scope}/layer_norm/layer_norm_bias"]


def timing_signal(length, channels):
    """add_timing_signal_1d: [sin | cos], timescales spaced by log(1e4) / (channels/2 - 1)."""
    half = channels // 2
    inverse = np.exp(np.arange(half) * -(math.log(1e4) / max(half - 1, 1)))
    scaled = np.arange(length)[:, None] * inverse[None, :]
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1)


def multihead_attention(x, memory, bias, variables, scope):
    def heads(t):
        return t.reshape(t.shape[0], HEADS, -1).transpose(1, 0, 2)

    kernel = {n: variables[f"{scope}/multihead_attention/{n}/kernel"]
              for n in ("q", "k", "v", "output_transform")}
    q = heads(x @ kernel["q"]) * (D // HEADS) ** -0.5
    k, v = heads(memory @ kernel["k"]), heads(memory @ kernel["v"])
    logits = q @ k.transpose(0, 2, 1) + bias
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    combined = (weights @ v).transpose(1, 0, 2).reshape(x.shape[0], -1)
    return combined @ kernel["output_transform"]


def ffn(x, variables, scope):
    hidden = np.maximum(
        x @ variables[f"{scope}/conv1/kernel"] + variables[f"{scope}/conv1/bias"], 0)
    return hidden @ variables[f"{scope}/conv2/kernel"] + variables[f"{scope}/conv2/bias"]


def sublayer(x, compute, variables, scope, pre_norm):
    """layer_preprocess "n" / postprocess "da", or preprocess "none" / postprocess "dan"."""
    if pre_norm:
        return x + compute(layer_norm(x, variables, f"{scope}/layer_prepostprocess"))
    return layer_norm(x + compute(x), variables, f"{scope}/layer_postprocess")


def numpy_logits(variables, pre_norm, layers, inputs, targets, space=0):
    body = "transformer/body"
    table = np.concatenate([variables[f"transformer/symbol_modality_{VOCAB}_{D}/shared/"
                                      f"weights_{i}"] for i in range(SHARDS)])

    def bottom(ids):
        return table[ids] * D ** 0.5 * (ids != 0)[:, None]

    x = bottom(inputs) + variables[f"{body}/target_space_embedding/kernel"][space]
    x = x + timing_signal(len(inputs), D)
    padding_bias = np.where(inputs == 0, -1e9, 0.0)[None, None, :]
    for i in range(layers[0]):
        scope = f"{body}/encoder/layer_{i}"
        x = sublayer(x, lambda h: multihead_attention(h, h, padding_bias, variables,
                                                      f"{scope}/self_attention"),
                     variables, f"{scope}/self_attention", pre_norm)
        x = sublayer(x, lambda h: ffn(h, variables, f"{scope}/ffn"), variables, f"{scope}/ffn",
                     pre_norm)
    memory = layer_norm(x, variables, f"{body}/encoder/layer_prepostprocess") if pre_norm else x
    embedded = bottom(targets)
    y = np.concatenate([np.zeros((1, D)), embedded[:-1]]) + timing_signal(len(targets), D)
    causal = np.triu(np.full((len(targets),) * 2, -1e9), 1)[None]
    for i in range(layers[1]):
        scope = f"{body}/decoder/layer_{i}"
        y = sublayer(y, lambda h: multihead_attention(h, h, causal, variables,
                                                      f"{scope}/self_attention"),
                     variables, f"{scope}/self_attention", pre_norm)
        y = sublayer(y, lambda h: multihead_attention(h, memory, padding_bias, variables,
                                                      f"{scope}/encdec_attention"),
                     variables, f"{scope}/encdec_attention", pre_norm)
        y = sublayer(y, lambda h: ffn(h, variables, f"{scope}/ffn"), variables, f"{scope}/ffn",
                     pre_norm)
    if pre_norm:
        y = layer_norm(y, variables, f"{body}/decoder/layer_prepostprocess")
    return y @ table.T


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
    return write_vocabulary(str(tmp_path_factory.mktemp("vocab") /
                                "vocab.translate_test.64.subwords"))


@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_equal_tensor2tensor_equations(variant, vocab_file, tmp_path):
    from t2t_repro.importing.tensor2tensor import tensor2tensor_model
    from t2t_repro.models.transformer import Transformer

    pre_norm, layers = VARIANTS[variant]
    variables = t2t_variables(pre_norm, layers, seed=len(variant))
    imported = tensor2tensor_model(write_checkpoint(variables, str(tmp_path)), vocab_file,
                                   HEADS, target_space_id=0)
    model = Transformer(imported.hparams, VOCAB, VOCAB)
    rng = np.random.default_rng(3)
    inputs = rng.integers(2, VOCAB, size=(2, 7))
    inputs[1, 5:] = 0  # padding
    targets = rng.integers(2, VOCAB, size=(2, 6))
    model.build({"inputs": inputs.shape, "targets": targets.shape})
    imported.set_weights(model)
    ours = np.asarray(model({"inputs": inputs, "targets": targets}))
    for row in range(2):
        expected = numpy_logits(variables, pre_norm, layers, inputs[row], targets[row])
        difference = np.abs(ours[row] - expected).max()
        print(f"{variant}: largest logit difference {difference:.2e}")
        assert difference < 1e-5


def test_subword_vocabulary_round_trip(vocab_file):
    """Greedy longest match over escaped tokens, as tensor2tensor's SubwordTextEncoder."""
    from t2t_repro.data.tensor2tensor_subwords import Tensor2TensorSubwords

    vocabulary = Tensor2TensorSubwords(vocab_file)
    ids = vocabulary.encode("the cat sat.")
    assert [SUBTOKENS[i] for i in ids] == ["the_", "cat_", "sat_", ".", "_"]
    assert vocabulary.decode(ids + [1, 5]) == "the cat sat."
    text = "dog_x Über 2"  # an underscore, and a character outside the alphabet
    assert vocabulary.decode(vocabulary.encode(text)) == text


def test_other_model_and_missing_vocabulary_are_one_line_errors(vocab_file, tmp_path):
    other = tmp_path / "lstm"
    other.mkdir()
    write_checkpoint({"lstm_seq2seq/body/encoder/kernel": np.zeros((4, 4), np.float32)},
                     str(other))
    good = tmp_path / "t2t"
    good.mkdir()
    write_checkpoint(t2t_variables(False, (1, 1), seed=0), str(good))
    cases = [(str(other), vocab_file, "lstm_seq2seq"),
             (str(good), str(tmp_path / "absent.subwords"), "absent.subwords")]
    for checkpoint, vocabulary, named in cases:
        output = tmp_path / "run"
        line = one_line_error(run_module(
            "t2t_repro.import_model", "--format=tensor2tensor", f"--checkpoint={checkpoint}",
            f"--vocab_file={vocabulary}", f"--num_heads={HEADS}", "--source_language=en",
            "--target_language=de", f"--output_dir={output}"))
        assert named in line
        assert not output.exists()


def test_a_checkpoint_is_named_by_its_folder_its_prefix_or_any_of_its_files(vocab_file,
                                                                            tmp_path):
    """TensorFlow reads an `.index` file as a checkpoint of no variables (and the others not at
    all); the import reads the checkpoint the file belongs to."""
    from t2t_repro.importing.tensor2tensor import checkpoint_prefix

    folder = tmp_path / "t2t"
    write_checkpoint(t2t_variables(False, (1, 1), seed=0), str(folder))
    prefix = str(folder / "model.ckpt-7")  # write_checkpoint's global step
    for name in (str(folder), prefix, *(prefix + suffix for suffix in (
            ".index", ".meta", ".data-00000-of-00001"))):
        assert checkpoint_prefix(name) == prefix
    hparams = []
    for number, name in enumerate((folder, prefix + ".index")):
        run = tmp_path / f"run{number}"
        result = run_module(
            "t2t_repro.import_model", "--format=tensor2tensor", f"--checkpoint={name}",
            f"--vocab_file={vocab_file}", f"--num_heads={HEADS}", "--source_language=en",
            "--target_language=de", f"--output_dir={run}")
        assert result.returncode == 0, result.stderr
        assert f"d_model {D}, {HEADS} heads, post-norm;" in result.stdout
        hparams.append(json.loads((run / "hparams.json").read_text()))
    assert hparams[0] == hparams[1]


HINT = ("give the folder tensor2tensor trained in (with its `checkpoint` file), or a checkpoint "
        "prefix such as model.ckpt-250000.")


@pytest.mark.parametrize("case", ["missing", "empty folder", "run of this project",
                                  "weights file"])
def test_a_checkpoint_path_that_names_no_tensorflow_checkpoint_says_what_it_names(
        vocab_file, tmp_path, case):
    run_here = tmp_path / "trained_here"
    run_here.mkdir()
    (run_here / "ckpt-3.weights.h5").write_bytes(b"")
    (tmp_path / "empty").mkdir()
    path, message = {
        "missing": (tmp_path / "nope", f"does not exist, nor does {tmp_path / 'nope'}.index; "
                                       f"{HINT}"),
        "empty folder": (tmp_path / "empty", f"holds no TensorFlow checkpoint; {HINT}"),
        "run of this project": (run_here, "is a run of this project, which needs no import: "
                                          "decode, export or fine-tune it as it is."),
        "weights file": (run_here / "ckpt-3.weights.h5", "is a Keras weights file (a checkpoint "
                         f"of this project, which needs no import), not tensor2tensor's; {HINT}"),
    }[case]
    output = tmp_path / "run"
    line = one_line_error(run_module(
        "t2t_repro.import_model", "--format=tensor2tensor", f"--checkpoint={path}",
        f"--vocab_file={vocab_file}", f"--num_heads={HEADS}", "--source_language=en",
        "--target_language=de", f"--output_dir={output}"))
    assert line == f"error: {path} {message}"
    assert not output.exists()


def test_the_heads_a_checkpoint_does_not_record_must_be_given(vocab_file, tmp_path):
    """A default of 8 heads would import the stand-in's 2 as another model, silently."""
    folder = tmp_path / "t2t"
    write_checkpoint(t2t_variables(False, (1, 1), seed=0), str(folder))
    output = tmp_path / "run"
    line = one_line_error(run_module(
        "t2t_repro.import_model", "--format=tensor2tensor", f"--checkpoint={folder}",
        f"--vocab_file={vocab_file}", "--source_language=en", "--target_language=de",
        f"--output_dir={output}"))
    assert line == ("error: --format=tensor2tensor needs --num_heads: a checkpoint does not "
                    "record its attention heads (the hparams set it was trained with does: "
                    "transformer_base 8, transformer_big 16).")
    assert not output.exists()


@pytest.mark.parametrize("flag", ["--num_heads=0", "--target_space_id=-1"])
def test_heads_or_a_target_space_below_their_range_are_refused_as_the_flags_are_read(
        vocab_file, tmp_path, flag):
    """Not a ZeroDivisionError, or Python's row -1 taken for the last target space."""
    output = tmp_path / "run"
    result = run_module("t2t_repro.import_model", "--format=tensor2tensor",
                        f"--checkpoint={tmp_path}", f"--vocab_file={vocab_file}",
                        "--source_language=en", "--target_language=de",
                        f"--output_dir={output}", flag)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"flag {flag}: {flag.split('=')[1]} is not" in result.stderr
    assert not output.exists()


def numpy_greedy(variables, pre_norm, layers, inputs, max_length):
    """Greedy decoding with `numpy_logits`: the likeliest id but padding at each step, to EOS
    or `max_length` ids."""
    outputs = []
    while len(outputs) < max_length and (not outputs or outputs[-1] != 1):
        logits = numpy_logits(variables, pre_norm, layers, inputs, np.array(outputs + [0]))[-1]
        outputs.append(int(np.argmax(logits[1:])) + 1)
    return outputs


def imported_run(variables, vocab_file, tmp_path):
    """The import command's run folder (`tmp_path/run`) of a checkpoint of `variables`."""
    checkpoint = write_checkpoint(variables, str(tmp_path / "t2t"))
    run = tmp_path / "run"
    imported = run_module(
        "t2t_repro.import_model", "--format=tensor2tensor", f"--checkpoint={checkpoint}",
        f"--vocab_file={vocab_file}", f"--num_heads={HEADS}", "--source_language=en",
        "--target_language=de", f"--output_dir={run}")
    assert imported.returncode == 0, imported.stderr
    return run


def test_the_imported_run_decodes_and_scores_as_the_equations(vocab_file, tmp_path):
    """The command's run folder, through the decoder command, gives the greedy outputs (beam
    1) and the scores of given translations (--score_file) of the NumPy forward pass."""
    from t2t_repro.data.tensor2tensor_subwords import Tensor2TensorSubwords

    pre_norm, layers = VARIANTS["post-norm transformer_base_v1"]
    variables = t2t_variables(pre_norm, layers, seed=5)
    run = imported_run(variables, vocab_file, tmp_path)
    texts = ["the cat sat on the mat.", "a cat sat.", "on the mat"]
    source = tmp_path / "source.en"
    source.write_text("".join(text + "\n" for text in texts), encoding="utf-8")
    decoded = run_module("t2t_repro.decoder", f"--output_dir={run}",
                         "--decode_hparams=beam_size=1,extra_length=4",
                         f"--decode_from_file={source}")
    assert decoded.returncode == 0, decoded.stderr
    vocabulary = Tensor2TensorSubwords(vocab_file)
    expected = []
    for text in texts:
        inputs = np.array(vocabulary.encode(text) + [1])
        expected.append(vocabulary.decode(
            numpy_greedy(variables, pre_norm, layers, inputs, len(inputs) + 4)))
    assert output_lines(decoded.stdout) == expected

    # A random model's greedy outputs repeat one subtoken; scores of given translations are
    # sums over every logit's normalizer, so they check the whole forward pass per sentence.
    pairs = list(zip(texts, ["the mat sat.", "a cat sat on the mat.", "the cat, on a mat 2."]))
    score_file = tmp_path / "pairs.tsv"
    score_file.write_text("".join(f"{en}\t{de}\n" for en, de in pairs), encoding="utf-8")
    scored = run_module("t2t_repro.decoder", f"--output_dir={run}", f"--score_file={score_file}")
    assert scored.returncode == 0, scored.stderr
    expected_scores = []
    for text, translation in pairs:
        inputs = np.array(vocabulary.encode(text) + [1])
        targets = np.array(vocabulary.encode(translation) + [1])
        logits = numpy_logits(variables, pre_norm, layers, inputs, targets)
        log_probs = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
        expected_scores.append((log_probs[np.arange(len(targets)), targets].sum(), len(targets)))
    ours = [line.split("\t") for line in output_lines(scored.stdout)]
    assert [int(count) for _, count in ours] == [count for _, count in expected_scores]
    differences = [abs(float(score) - expected_score)
                   for (score, _), (expected_score, _) in zip(ours, expected_scores)]
    print(f"scores {[score for score, _ in ours]}: largest difference {max(differences):.1e}")
    assert max(differences) <= 1e-4, list(zip(ours, expected_scores))
    assert len({round(score, 3) for score, _ in expected_scores}) == len(pairs)


CORPUS = ["the cat sat on the mat.", "a cat sat.", "on the mat", "the mat sat on a cat.",
          "a cat, the cat.", "the cat sat 2 mats."]


def write_corpus(folder):
    """CORPUS as parallel train and eval files (the same lines each side: a copy task)."""
    folder.mkdir()
    for side in ("en", "de"):
        (folder / f"train.{side}").write_text("".join(line + "\n" for line in CORPUS * 4),
                                              encoding="utf-8")
    return (f"train_source={folder / 'train.en'},train_target={folder / 'train.de'},"
            f"eval_source={folder / 'train.en'},eval_target={folder / 'train.de'},"
            f"source_language=en,target_language=de,shared_vocabulary=false,num_train_shards=1")


def test_the_imported_run_fine_tunes_on_a_corpus_in_its_own_vocabulary(vocab_file, tmp_path):
    """Datagen encodes a new corpus with the run's tensor2tensor vocabulary (given as
    source_vocabulary/target_vocabulary), and --warm_start_from fine-tunes the run on it, on
    TensorFlow and on JAX, from the imported weights."""
    from importing.fine_tuning import fine_tune_one_step_on_both_backends, largest_weight_move
    from t2t_repro.data.records import read_shards
    from t2t_repro.data.tensor2tensor_subwords import Tensor2TensorSubwords

    run = imported_run(t2t_variables(True, (1, 2), seed=8), vocab_file, tmp_path)
    vocabularies = {side: run / "data" / f"translate_text_files.{side}.subwords"
                    for side in ("source", "target")}
    data = tmp_path / "data"
    generated = run_module(
        "t2t_repro.datagen", "--problem=translate_text_files", f"--data_dir={data}",
        f"--data_hparams={write_corpus(tmp_path / 'corpus')},"
        f"source_vocabulary={vocabularies['source']},target_vocabulary={vocabularies['target']}")
    assert generated.returncode == 0, generated.stderr
    metadata = json.loads((data / "translate_text_files.datagen.json").read_text())
    assert metadata["vocabulary_format"] == "tensor2tensor_subwords"
    vocabulary = Tensor2TensorSubwords(vocab_file)
    first = next(read_shards(sorted(map(str, data.glob("translate_text_files-eval-*"))))
                 .as_numpy_iterator())
    assert list(first["inputs"]) == vocabulary.encode(CORPUS[0]) + [1]  # in its subtokens

    runs = fine_tune_one_step_on_both_backends(
        run, ["--problem=translate_text_files", f"--data_dir={data}"], tmp_path)
    for backend, tuned_run in runs.items():
        move = largest_weight_move(run / "ckpt-0.weights.h5", tuned_run / "ckpt-1.weights.h5")
        assert 0 < move <= 1e-5, (backend, move)


def test_vocabularies_of_two_formats_or_an_unreadable_one_are_one_line_errors(vocab_file,
                                                                             tmp_path):
    """Nothing is written: both are found before datagen writes a file."""
    corpus = write_corpus(tmp_path / "corpus")
    not_subwords = tmp_path / "words.subwords"
    not_subwords.write_text("the\ncat\n", encoding="utf-8")
    cases = [(f"source_vocabulary={vocab_file}",
              f"source_vocabulary={vocab_file} is a tensor2tensor vocabulary, so the other "
              f"side's must be one too: give target_vocabulary="),
             (f"source_vocabulary={not_subwords},target_vocabulary={vocab_file}",
              f"source_vocabulary={not_subwords} is not a tensor2tensor subword vocabulary")]
    for given, named in cases:
        line = one_line_error(run_module(
            "t2t_repro.datagen", "--problem=translate_text_files",
            f"--data_dir={tmp_path / 'data'}", f"--data_hparams={corpus},{given}"))
        assert named in line
        assert not (tmp_path / "data").exists() or not os.listdir(tmp_path / "data")
