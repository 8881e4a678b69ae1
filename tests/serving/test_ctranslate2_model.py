"""The CTranslate2 conversion computes what the Keras model computes: on tiny models trained
briefly to reverse sequences, CTranslate2's greedy outputs equal ours id for id, so do its
outputs given target prefixes (greedy; beam 4 up to the searches' known difference below), and
its teacher-forced log-probabilities equal ours within 1e-4, for post-norm (sinusoidal
positions) and pre-norm (learned positions) models, and so do its argmax alignments from the
same attention layer and heads, greedy and beam 4; a quantized conversion still decodes; an
existing folder, an unknown quantization or a restricted self-attention model is refused.

Beam 4: ours is tensor2tensor's search, which ends a hypothesis when EOS is among a step's
2 × beam best candidates; CTranslate2's ends one only when EOS is among its beam best. Where a
hypothesis ending in EOS ranks between the two, CTranslate2 drops an output that scores higher
than the one it returns. Which models meet that case depends on the CPU that trained them (a
Zen 5's training of the post-norm model does, on one of 24 prefixed sentences; a Zen 3's did
not), so beam comparisons require equal outputs except where CTranslate2's own scores rank
ours higher."""

import numpy as np
import pytest

ctranslate2 = pytest.importorskip("ctranslate2")

import keras  # noqa: E402

from t2t_repro.decoding.alignments import Aligner, add_alignment_hparams  # noqa: E402
from t2t_repro.decoding.transformer_search import TransformerBeamSearch  # noqa: E402
from t2t_repro.hparams import HParams, create_hparams  # noqa: E402
from t2t_repro.models.transformer import Transformer  # noqa: E402
from t2t_repro.serving.ctranslate2_model import (  # noqa: E402
    CTranslate2ExportError,
    write_ctranslate2_model,
)
from t2t_repro.names import EOS_ID  # noqa: E402
from t2t_repro.training.losses import LabelSmoothedCrossEntropy  # noqa: E402

VOCAB_SIZE = 24
FIRST_SYMBOL = 2
MAX_SYMBOLS = 10
# The longest output of the greedy, beam, alignment and int8 comparisons, in both engines.
OUTPUT_LENGTH = MAX_SYMBOLS + 4


class SymbolProblem:
    """A problem without a sentencepiece vocabulary: tokens are named by id."""

    input_vocab_size = target_vocab_size = VOCAB_SIZE


def reversal_examples(rng, count):
    """Sources of random symbols with EOS, targets their reversal with EOS, 0-padded."""
    width = MAX_SYMBOLS + 1
    sources = np.zeros((count, width), np.int32)
    targets = np.zeros((count, width), np.int32)
    for row, length in enumerate(rng.integers(2, MAX_SYMBOLS + 1, size=count)):
        symbols = rng.integers(FIRST_SYMBOL, VOCAB_SIZE, size=length)
        sources[row, : length + 1] = [*symbols, EOS_ID]
        targets[row, : length + 1] = [*symbols[::-1], EOS_ID]
    return sources, targets


def trained_model(overrides):
    """transformer_tiny (with `overrides`) after 300 Adam steps of sequence reversal."""
    keras.utils.set_random_seed(3)
    hparams = create_hparams("transformer_tiny", f"layer_prepostprocess_dropout=0.0,{overrides}")
    model = Transformer(hparams, VOCAB_SIZE, VOCAB_SIZE).build_weights()
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss=LabelSmoothedCrossEntropy(0.0))
    # Adam's slots made inside fit's first trace would make Keras trace the step again (2-3 s).
    model.optimizer.build(model.trainable_variables)
    sources, targets = reversal_examples(np.random.default_rng(0), 9600)
    model.fit({"inputs": sources, "targets": targets}, targets, batch_size=32, epochs=1,
              verbose=0)
    return model


def tokens(ids):
    return [f"<{int(i)}>" for i in ids if i != 0]


def ids_of(token_list):
    return [int(token[1:-1]) for token in token_list]


def differences_ctranslate2_ranks_ours_higher(translator, sources, ours, theirs):
    """Rows where our output ids (without EOS) differ from CTranslate2's; fails unless
    CTranslate2's own `score_batch` gives each of ours a log-probability over 1e-3 above its
    own output's: the one way the two beam searches differ (module docstring)."""
    differ = [row for row, (our, their) in enumerate(zip(ours, theirs)) if our != their]
    for row in differ:
        scores = [sum(result.log_probs) for result in translator.score_batch(
            [tokens(sources[row])] * 2, [tokens(ours[row]), tokens(theirs[row])])]
        assert scores[0] > scores[1] + 1e-3, (row, ours[row], theirs[row], scores)
    return differ


@pytest.fixture(scope="module", params=["normalize_first=false",
                                        "normalize_first=true,position_encoding=learned"],
                ids=["post-norm, sinusoids", "pre-norm, learned positions"])
def converted(request, tmp_path_factory):
    model = trained_model(request.param)
    directory = tmp_path_factory.mktemp("ct2") / "model"
    write_ctranslate2_model(model, SymbolProblem(), str(directory), info={"test": True})
    sources, targets = reversal_examples(np.random.default_rng(1), 24)
    return {"model": model, "dir": directory, "sources": sources, "targets": targets,
            "translator": ctranslate2.Translator(str(directory), device="cpu"),
            "best_outputs": {}}


def best_outputs(converted, beam_size):
    """Our search's best outputs (α 0) for the converted model's sources, at most OUTPUT_LENGTH
    long: decoded once per model and beam size for the tests that read them."""
    decoded, sources = converted["best_outputs"], converted["sources"]
    if beam_size not in decoded:
        search = TransformerBeamSearch(converted["model"], beam_size=beam_size, alpha=0.0)
        decoded[beam_size] = search(sources, np.full(len(sources), OUTPUT_LENGTH)).best()
    return decoded[beam_size]


def test_greedy_outputs_equal_ours_id_for_id(converted):
    sources, length = converted["sources"], OUTPUT_LENGTH
    ours = best_outputs(converted, 1)
    theirs = converted["translator"].translate_batch(
        [tokens(row) for row in sources], beam_size=1, max_decoding_length=length)
    expected = [[int(i) for i in row if i != 0] for row in ours]
    # CTranslate2 leaves the EOS out of its hypotheses; ours keeps it. A hypothesis that
    # reached the length limit ended without one in both.
    hypotheses = [ids_of(result.hypotheses[0]) for result in theirs]
    assert [ids + [EOS_ID] if len(ids) < length else ids for ids in hypotheses] == expected
    reversed_right = [row[:-1] == list(source[source > EOS_ID][::-1])
                      for row, source in zip(expected, sources)]
    # Trained, not degenerate: every output differs, and many are already right.
    assert len(set(map(tuple, expected))) == len(expected)
    assert sum(reversed_right) >= len(sources) // 3, "the model should be learning to reverse"


WIDE_VOCAB_SIZE = 4099


class WideSymbolProblem:
    input_vocab_size = target_vocab_size = WIDE_VOCAB_SIZE


@pytest.mark.parametrize("beam_size", [1, 4])
def test_a_wide_vocabulary_decodes_as_ctranslate2_id_for_id(tmp_path, beam_size):
    """Over 4,099 tokens the search takes its top-k block by block and its normaliser from a
    softmax (`decoding/logit_reductions.py`): an untrained model's outputs, each forced to its
    length as `bench decode` forces them (EOS never ends one, so log P alone ranks them), equal
    CTranslate2's id for id. Its softmax weights are its own: an untrained model with tied ones
    tends to repeat its input token, and these outputs must differ from sentence to sentence."""
    keras.utils.set_random_seed(4)
    hparams = create_hparams("transformer_tiny", "layer_prepostprocess_dropout=0.0,"
                                                  "shared_embedding_and_softmax_weights=false")
    model = Transformer(hparams, WIDE_VOCAB_SIZE, WIDE_VOCAB_SIZE).build_weights()
    write_ctranslate2_model(model, WideSymbolProblem(), str(tmp_path / "ct2"))
    rng = np.random.default_rng(6)
    sources = np.zeros((12, 10), np.int32)
    for row, length in enumerate(rng.integers(3, 10, size=len(sources))):
        sources[row, : length + 1] = [*rng.integers(FIRST_SYMBOL, WIDE_VOCAB_SIZE, length), EOS_ID]
    length = 12
    ours = TransformerBeamSearch(model, beam_size=beam_size, alpha=0.0, force_max_length=True)(
        sources, np.full(len(sources), length)).best()
    theirs = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu").translate_batch(
        [tokens(row) for row in sources], beam_size=beam_size, length_penalty=0,
        min_decoding_length=length, max_decoding_length=length)
    assert [ids_of(result.hypotheses[0]) for result in theirs] == ours.tolist()
    assert len({tuple(row) for row in ours.tolist()}) > len(sources) // 2


def reversal_prefixes(targets, rng):
    """0 to 3 leading pieces of each target's reversal; every third non-empty one with its last
    piece replaced by a random symbol, so that the search must continue from a wrong start."""
    prefixes = []
    for row, target in enumerate(targets):
        prefix = [int(i) for i in target[target > EOS_ID][: rng.integers(0, 4)]]
        if row % 3 == 0 and prefix:
            prefix[-1] = int(rng.integers(FIRST_SYMBOL, VOCAB_SIZE))
        prefixes.append(prefix)
    return prefixes


@pytest.mark.parametrize("beam_size", [1, 4])
def test_target_prefix_outputs_equal_ctranslate2s(converted, beam_size):
    """Length penalty off in both (α 0; CTranslate2's length_penalty 0): CTranslate2 divides
    by length^penalty, not GNMT's lp, and leaves the prefix's log-probability out of its
    scores, where ours is the whole output's log P; at α 0 both rank a sentence's
    hypotheses alike."""
    sources, length = converted["sources"], MAX_SYMBOLS + 6
    prefixes = reversal_prefixes(converted["targets"], np.random.default_rng(5))
    padded = np.zeros((len(prefixes), 3), np.int32)
    for row, prefix in enumerate(prefixes):
        padded[row, : len(prefix)] = prefix
    search = TransformerBeamSearch(converted["model"], beam_size=beam_size, alpha=0.0)
    output = search(sources, np.full(len(sources), length), target_prefix=padded)
    ours = output.best()
    theirs = converted["translator"].translate_batch(
        [tokens(row) for row in sources], target_prefix=[tokens(prefix) for prefix in prefixes],
        beam_size=beam_size, max_decoding_length=length, length_penalty=0)
    expected = [[int(i) for i in row if i != 0] for row in ours]
    hypotheses = [ids_of(result.hypotheses[0]) for result in theirs]
    if beam_size == 1:
        assert [ids + [EOS_ID] if len(ids) < length else ids for ids in hypotheses] == expected
    else:
        differ = differences_ctranslate2_ranks_ours_higher(
            converted["translator"], sources, [[i for i in row if i != EOS_ID] for row in expected],
            hypotheses)
        assert len(differ) <= len(sources) // 8, differ
    assert all(row[: len(prefix)] == prefix
               for row, prefix in zip(expected + hypotheses, prefixes * 2))
    # Each score is the whole output's log P, the forced pieces included, over the tokens
    # that may be output (not id 0): from one teacher-forced pass over the output.
    logits = converted["model"]({"inputs": sources, "targets": ours}).numpy().astype(np.float64)
    logits[..., 0] = -np.inf
    log_probs = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
    teacher_forced = [log_probs[row, np.arange(len(ids)), ids].sum()
                      for row, ids in enumerate(expected)]
    np.testing.assert_allclose(output.scores[:, 0], teacher_forced, atol=1e-4)
    # The prefixes matter: a wrong piece changes what follows.
    unforced = search(sources, np.full(len(sources), length)).best()
    changed = [not np.array_equal(a, b) for a, b in zip(ours, unforced)]
    assert sum(changed) >= len(sources) // 6


def test_teacher_forced_log_probabilities_equal_ours(converted):
    sources, targets = converted["sources"], converted["targets"]
    logits = converted["model"]({"inputs": sources, "targets": targets}).numpy()
    log_probs = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
    theirs = converted["translator"].score_batch(
        [tokens(row) for row in sources], [tokens(row)[:-1] for row in targets])
    for row, result in enumerate(theirs):
        length = np.count_nonzero(targets[row])
        ours = log_probs[row, np.arange(length), targets[row, :length]]
        assert result.tokens == tokens(targets[row])
        np.testing.assert_allclose(result.log_probs, ours, atol=1e-4)


@pytest.mark.parametrize("layer, heads", [(-1, 0), (0, 1), (1, 2)])
@pytest.mark.parametrize("beam", [1, 4])
def test_alignments_equal_ctranslate2s_attention_argmax(converted, tmp_path, layer, heads, beam):
    """Our Pharaoh alignments of our best hypotheses equal the argmax over the source pieces
    (EOS left out) of the attention CTranslate2 returns for its best hypotheses, converted with
    the same alignment layer and heads."""
    directory = tmp_path / "aligned"
    write_ctranslate2_model(converted["model"], SymbolProblem(), str(directory),
                            alignment_layer=layer, alignment_heads=heads)
    sources, length = converted["sources"], OUTPUT_LENGTH
    ours = best_outputs(converted, beam)
    decode_hparams = add_alignment_hparams(HParams())
    decode_hparams.override_from_string(f"alignment_layer={layer},alignment_heads={heads}")
    our_alignments = Aligner(converted["model"], SymbolProblem(), decode_hparams)(
        [list(row[row != 0]) for row in sources], list(ours))
    # Sentence by sentence: in a padded batch, CTranslate2's beam search (beam > 1) returns
    # for the first target token of a shorter source attention that is not its own.
    theirs = ctranslate2.Translator(str(directory), device="cpu").translate_batch(
        [tokens(row) for row in sources], beam_size=beam, length_penalty=0.0,
        max_decoding_length=length, return_attention=True, max_batch_size=1)
    their_alignments = []
    for row, result in zip(sources, theirs):
        attention = np.array(result.attention[0])[:, : np.count_nonzero(row) - 1]  # no EOS
        their_alignments.append(" ".join(sorted(
            f"{i}-{j}" for j, i in enumerate(attention.argmax(axis=1)))))
    differ = differences_ctranslate2_ranks_ours_higher(
        converted["translator"], sources,
        [[int(i) for i in row if i not in (0, EOS_ID)] for row in ours],
        [ids_of(result.hypotheses[0]) for result in theirs])
    assert len(differ) <= (0 if beam == 1 else len(sources) // 8), differ
    same = [row for row in range(len(sources)) if row not in differ]
    assert ([" ".join(sorted(our_alignments[row].split())) for row in same]
            == [their_alignments[row] for row in same])
    # Reversal: most target pieces align with their mirror image in the source.
    mirrored = [sum(int(i) == np.count_nonzero(row) - 2 - int(j)
                    for i, j in (pair.split("-") for pair in line.split()))
                for row, line in zip(sources, our_alignments)]
    assert layer != -1 or sum(mirrored) > 0.5 * sum(len(line.split()) for line in our_alignments)


def test_an_int8_conversion_is_ctranslate2s_int8_of_the_float32_model(converted, tmp_path):
    """The int8 folder holds int8 weights (under half of float32's bytes), and decodes
    exactly as CTranslate2's own int8 quantization of the float32 folder at load time. How close
    int8 decodes come to float32 ones depends on the CPU's int8 kernels, not on the conversion:
    on an AVX2 EPYC (u8s8 GEMM) fewer than half of these greedy outputs stay the same, on
    AVX-512 VNNI machines most do."""
    write_ctranslate2_model(converted["model"], SymbolProblem(), str(tmp_path / "int8"),
                            quantization="int8")
    int8_bytes = (tmp_path / "int8" / "model.bin").stat().st_size
    assert int8_bytes < 0.5 * (converted["dir"] / "model.bin").stat().st_size
    sources = [tokens(row) for row in converted["sources"]]
    quantized_at_load = ctranslate2.Translator(str(converted["dir"]), device="cpu",
                                               compute_type="int8_float32")
    converted_int8 = ctranslate2.Translator(str(tmp_path / "int8"), device="cpu")
    assert converted_int8.compute_type == quantized_at_load.compute_type == "int8_float32"
    # Bounded as our searches are: an int8 output that never ends would run past the learned
    # position table.
    settings = {"beam_size": 1, "return_scores": True, "max_decoding_length": OUTPUT_LENGTH}
    expected = quantized_at_load.translate_batch(sources, **settings)
    got = converted_int8.translate_batch(sources, **settings)
    assert [r.hypotheses for r in got] == [r.hypotheses for r in expected]
    assert [r.scores[0] for r in got] == pytest.approx([r.scores[0] for r in expected], abs=1e-5)


def test_an_existing_folder_is_never_replaced(converted):
    before = sorted(path.name for path in converted["dir"].iterdir())
    with pytest.raises(CTranslate2ExportError, match="already exists"):
        write_ctranslate2_model(converted["model"], SymbolProblem(), str(converted["dir"]))
    assert sorted(path.name for path in converted["dir"].iterdir()) == before
    assert not list(converted["dir"].parent.glob(".tmp-*"))


def test_an_unknown_quantization_is_an_error_naming_the_choices(converted, tmp_path):
    with pytest.raises(CTranslate2ExportError, match="int8"):
        write_ctranslate2_model(converted["model"], SymbolProblem(), str(tmp_path / "x"),
                                quantization="int4")
    assert not (tmp_path / "x").exists()


def test_a_restricted_self_attention_model_is_refused(tmp_path):
    """CTranslate2 has no windowed encoder self-attention: refuse rather than convert to a
    model that computes something else."""
    hparams = create_hparams("transformer_tiny", "self_attention_window=4")
    model = Transformer(hparams, VOCAB_SIZE, VOCAB_SIZE).build_weights()
    with pytest.raises(CTranslate2ExportError, match="self_attention_window=4.*exporter"):
        write_ctranslate2_model(model, SymbolProblem(), str(tmp_path / "ct2"))
    assert not (tmp_path / "ct2").exists()


def test_a_model_adding_a_vector_to_every_encoder_input_is_refused_naming_what_takes_it(
        tmp_path):
    """tensor2tensor's target-space embedding (hparam encoder_input_bias): CTranslate2 has no
    such input; the refusal sends the user to what does take it, not to a SavedModel alone,
    which an imported tensor2tensor run (subword vocabulary) cannot be."""
    hparams = create_hparams("transformer_tiny", "encoder_input_bias=true")
    model = Transformer(hparams, VOCAB_SIZE, VOCAB_SIZE).build_weights()
    with pytest.raises(CTranslate2ExportError) as raised:
        write_ctranslate2_model(model, SymbolProblem(), str(tmp_path / "ct2"))
    assert str(raised.value).endswith(
        "which CTranslate2's Transformer cannot express; decode and score it with the Python "
        "commands (a SavedModel export takes it too, unless its vocabulary is tensor2tensor's "
        "subwords, as an imported checkpoint's is).")
    assert not (tmp_path / "ct2").exists()
