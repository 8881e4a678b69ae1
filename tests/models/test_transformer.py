"""The full Transformer model (paper §3): shapes, causality, padding, tied embeddings, configs."""

import math

import keras
import numpy as np
import pytest
from keras import ops

from t2t_repro.errors import ConfigurationError
from t2t_repro.hparams import create_hparams
from t2t_repro.layers import SharedEmbedding
from t2t_repro.models.transformer import Transformer
from t2t_repro.training.losses import LabelSmoothedCrossEntropy

VOCAB = 29  # differs from every other dimension of transformer_tiny, so shapes identify variables
INPUTS = np.array([[5, 7, 9, 3, 0, 0], [4, 2, 8, 11, 12, 6]], dtype="int32")
TARGETS = np.array([[6, 3, 8, 1, 0], [9, 9, 2, 4, 1]], dtype="int32")
FEATURES = {"inputs": INPUTS, "targets": TARGETS}


def _hparams(**overrides):
    """transformer_tiny without dropout, so outputs are deterministic, plus `overrides`."""
    overrides = {"layer_prepostprocess_dropout": 0.0, **overrides}
    return create_hparams("transformer_tiny", ",".join(f"{k}={v}" for k, v in overrides.items()))


def _model(seed=0, input_vocab_size=VOCAB, target_vocab_size=VOCAB, **overrides):
    keras.utils.set_random_seed(seed)
    model = Transformer(_hparams(**overrides), input_vocab_size, target_vocab_size)
    model.build_weights()
    return model


@pytest.fixture(scope="module")
def tiny_model():
    """One post-norm, shared-embedding transformer_tiny for the tests that only read it."""
    return _model()


def _np(x):
    return ops.convert_to_numpy(x)


def _paper_positions(length, d):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d))."""
    table = np.zeros((length, d))
    for pos in range(length):
        for i in range(d // 2):
            table[pos, 2 * i] = math.sin(pos / 10000 ** (2 * i / d))
            table[pos, 2 * i + 1] = math.cos(pos / 10000 ** (2 * i / d))
    return table.astype("float32")


def _shifted_right(targets):
    return np.concatenate([np.zeros_like(targets[:, :1]), targets[:, :-1]], axis=1)


def _manual_decoder_output(model, targets, memory, memory_mask):
    """The decoder stack's output before the softmax projection, composed by hand: decoder
    inputs are the targets shifted right, embedded as E[id]·√d_model plus the paper's sinusoids,
    then the model's own decoder layers under a lower-triangular mask."""
    d = model.hparams.hidden_size
    matrix = _np(model.target_embedding.embeddings)
    decoder_ids = _shifted_right(targets)
    length = decoder_ids.shape[1]
    x = matrix[decoder_ids] * math.sqrt(d) + _paper_positions(length, d)
    lower_triangle = np.tril(np.ones((length, length), dtype=bool))
    for layer in model.decoder_layers:
        x = layer(x, memory, self_attention_mask=lower_triangle, memory_mask=memory_mask)
    if model.decoder_final_norm is not None:
        x = model.decoder_final_norm(x)
    return _np(x)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_call_returns_logits_per_target_position(normalize_first):
    """call(features) -> [batch, target_len, vocab] next-token logits."""
    model = _model(normalize_first=normalize_first, num_hidden_layers=1)
    logits = model(FEATURES, training=False)
    assert logits.shape == (2, 5, VOCAB)
    assert np.all(np.isfinite(_np(logits)))


def test_encode_then_decode_equals_call(tiny_model):
    """encode(inputs) then decode(shifted targets) is exactly what call computes."""
    model = tiny_model
    memory, memory_mask = model.encode(INPUTS, training=False)
    assert memory.shape == (2, 6, model.hparams.hidden_size)
    logits = model.decode(_shifted_right(TARGETS), memory, memory_mask, training=False)
    np.testing.assert_allclose(_np(logits), _np(model(FEATURES, training=False)), atol=1e-5)


@pytest.mark.parametrize("changed_position", [0, 2, 4])
def test_later_target_token_never_changes_earlier_logits(changed_position, tiny_model):
    """Causal mask: decoder input t+1 is target t, so changing target t leaves the logits at
    positions <= t unchanged; the logits right after it must change (the test is not vacuous)."""
    model = tiny_model
    changed = TARGETS.copy()
    changed[:, changed_position] = (changed[:, changed_position] % (VOCAB - 1)) + 1
    assert np.all(changed[:, changed_position] != TARGETS[:, changed_position])
    before = _np(model(FEATURES, training=False))
    after = _np(model({"inputs": INPUTS, "targets": changed}, training=False))
    keep = changed_position + 1
    np.testing.assert_allclose(after[:, :keep], before[:, :keep], atol=1e-5)
    if keep < TARGETS.shape[1]:
        assert not np.allclose(after[:, keep], before[:, keep], atol=1e-3)


def test_extra_source_padding_changes_nothing_at_real_positions(tiny_model):
    """Padded source keys get zero weight, so appending more padding leaves the memory at every
    real source position, and all the target logits, unchanged."""
    model = tiny_model
    padded = np.pad(INPUTS, ((0, 0), (0, 4)))
    memory, _ = model.encode(INPUTS, training=False)
    padded_memory, _ = model.encode(padded, training=False)
    memory, padded_memory = _np(memory), _np(padded_memory)
    real = INPUTS != 0
    np.testing.assert_allclose(padded_memory[:, :6][real], memory[real], atol=1e-5)
    np.testing.assert_allclose(
        _np(model({"inputs": padded, "targets": TARGETS}, training=False)),
        _np(model(FEATURES, training=False)),
        atol=1e-5,
    )


def test_attention_weights_of_every_layer_obey_the_masks(tiny_model):
    """The weights offered for visualisation are distributions over the keys that put nothing on
    source padding or on later target positions, for every layer and head."""
    scores = tiny_model.attention_weights(FEATURES)
    batch, source_len = INPUTS.shape
    target_len = TARGETS.shape[1]
    heads = tiny_model.hparams.num_heads
    assert sorted(scores) == ["decoder_layer_0", "decoder_layer_1", "encoder_layer_0",
                              "encoder_layer_1"]
    pad_keys = INPUTS == 0  # [batch, s]
    later_keys = np.triu(np.ones((target_len, target_len), bool), k=1)
    for name, weights in scores.items():
        if name.startswith("encoder"):
            encoder_self = _np(weights)
            assert encoder_self.shape == (batch, heads, source_len, source_len)
            np.testing.assert_allclose(encoder_self.sum(-1), 1.0, atol=1e-5)
            assert np.all(encoder_self[np.broadcast_to(pad_keys[:, None, None, :],
                                                       encoder_self.shape)] == 0)
        else:
            decoder_self, cross = _np(weights["self"]), _np(weights["cross"])
            assert decoder_self.shape == (batch, heads, target_len, target_len)
            assert cross.shape == (batch, heads, target_len, source_len)
            np.testing.assert_allclose(decoder_self.sum(-1), 1.0, atol=1e-5)
            np.testing.assert_allclose(cross.sum(-1), 1.0, atol=1e-5)
            assert np.all(decoder_self[..., later_keys] == 0)
            assert np.all(cross[np.broadcast_to(pad_keys[:, None, None, :], cross.shape)] == 0)


def test_one_matrix_serves_source_target_and_softmax(tiny_model):
    """With a shared vocabulary the source embedding, target embedding and pre-softmax
    projection are one [vocab, d] variable, and logits = decoder_output · Eᵀ, where the decoder
    output is recomputed by hand from E[id]·√d_model + PE."""
    model = tiny_model
    assert model.input_embedding is model.target_embedding
    assert model.softmax_projection is None
    d = model.hparams.hidden_size
    vocab_shaped = [v for v in model.weights if tuple(v.shape) in ((VOCAB, d), (d, VOCAB))]
    assert len(vocab_shaped) == 1
    assert tuple(vocab_shaped[0].shape) == (VOCAB, d)
    assert vocab_shaped[0] is model.target_embedding.embeddings
    assert len(model.trainable_variables) == len({id(v) for v in model.trainable_variables})

    memory, memory_mask = model.encode(INPUTS, training=False)
    hidden = _manual_decoder_output(model, TARGETS, memory, memory_mask)
    expected = hidden @ _np(model.target_embedding.embeddings).T
    np.testing.assert_allclose(_np(model(FEATURES, training=False)), expected, atol=1e-4)


def test_encoder_embeds_source_as_scaled_row_plus_sinusoid(tiny_model):
    """The encoder input is E[id]·√d_model + PE: feeding that by hand through the model's encoder
    layers reproduces encode()."""
    model = tiny_model
    d = model.hparams.hidden_size
    x = _np(model.input_embedding.embeddings)[INPUTS] * math.sqrt(d)
    x = x + _paper_positions(INPUTS.shape[1], d)
    mask = (INPUTS != 0)[:, None, :]
    for layer in model.encoder_layers:
        x = layer(x, attention_mask=mask)
    memory, _ = model.encode(INPUTS, training=False)
    np.testing.assert_allclose(_np(memory), _np(x), atol=1e-5)


def test_loss_gradient_reaches_shared_matrix_through_all_three_roles(monkeypatch):
    """dLoss/dE is exactly the sum of three non-zero parts: the source lookup, the target lookup
    (each √d_model · dLoss/d(embedding output), scattered to the looked-up rows) and the softmax
    projection (dLoss/dlogitsᵀ · decoder output). No other path uses E, and none is cut."""
    if keras.backend.backend() != "tensorflow":
        pytest.skip("uses tf.GradientTape")
    import tensorflow as tf

    lookups, projections = [], []
    original_call, original_logits = SharedEmbedding.call, SharedEmbedding.logits

    def recording_call(self, ids):
        output = original_call(self, ids)
        lookups.append((ids, output))
        return output

    def recording_logits(self, hidden, projection=None):
        output = original_logits(self, hidden, projection)
        projections.append((hidden, output))
        return output

    monkeypatch.setattr(SharedEmbedding, "call", recording_call)
    monkeypatch.setattr(SharedEmbedding, "logits", recording_logits)
    model = _model(num_hidden_layers=1)
    matrix = model.target_embedding.embeddings
    lookups.clear()  # drop what building the model recorded
    projections.clear()
    with tf.GradientTape() as tape:
        logits = model(FEATURES, training=True)
        loss = LabelSmoothedCrossEntropy(0.1)(TARGETS, logits)
    assert len(lookups) == 2 and len(projections) == 1
    (source_ids, source_embedded), (decoder_ids, target_embedded) = lookups
    hidden, projected = projections[0]
    assert projected is logits
    source_ids, decoder_ids = _np(source_ids), _np(decoder_ids)
    np.testing.assert_array_equal(source_ids, INPUTS)
    np.testing.assert_array_equal(decoder_ids, _shifted_right(TARGETS))

    grads = tape.gradient(loss, [matrix, source_embedded, target_embedded, logits])
    total, d_source, d_target, d_logits = (_np(tf.convert_to_tensor(g)) for g in grads)
    scale = math.sqrt(model.hparams.hidden_size)
    source_part = np.zeros_like(total)
    np.add.at(source_part, source_ids, d_source * scale)
    target_part = np.zeros_like(total)
    np.add.at(target_part, decoder_ids, d_target * scale)
    softmax_part = np.einsum("btv,btd->vd", d_logits, _np(hidden))
    for part in (source_part, target_part, softmax_part):
        assert np.abs(part).max() > 1e-6
    np.testing.assert_allclose(total, source_part + target_part + softmax_part, atol=1e-6)


def test_separate_softmax_projection_when_not_shared():
    """shared_embedding_and_softmax_weights=False adds a [d, vocab] projection W, and
    logits = decoder_output · W instead of · Eᵀ."""
    model = _model(shared_embedding_and_softmax_weights=False, num_hidden_layers=1)
    d = model.hparams.hidden_size
    assert model.softmax_projection is not None
    kernel = model.softmax_projection.kernel
    assert tuple(kernel.shape) == (d, VOCAB)
    vocab_shaped = sorted(tuple(v.shape) for v in model.weights if VOCAB in tuple(v.shape))
    assert vocab_shaped == sorted([(VOCAB, d), (d, VOCAB)])
    memory, memory_mask = model.encode(INPUTS, training=False)
    hidden = _manual_decoder_output(model, TARGETS, memory, memory_mask)
    np.testing.assert_allclose(
        _np(model(FEATURES, training=False)), hidden @ _np(kernel), atol=1e-4
    )


def test_separate_source_embedding():
    """shared_source_target_embedding=False gives two embedding tables, of each vocabulary's
    size."""
    model = _model(input_vocab_size=VOCAB + 2, num_hidden_layers=1,
                   shared_source_target_embedding=False)
    d = model.hparams.hidden_size
    assert model.input_embedding is not model.target_embedding
    assert tuple(model.input_embedding.embeddings.shape) == (VOCAB + 2, d)
    assert tuple(model.target_embedding.embeddings.shape) == (VOCAB, d)


def test_shared_embedding_with_two_vocabulary_sizes_is_an_error():
    """One matrix cannot embed two vocabularies: construction fails and says what to change,
    instead of quietly building two tables."""
    with pytest.raises(ValueError) as error:
        Transformer(_hparams(), VOCAB + 2, VOCAB)
    message = str(error.value)
    assert "input_vocab_size=31" in message and "target_vocab_size=29" in message
    assert "shared_source_target_embedding=false" in message
    assert "one shared vocabulary" in message


@pytest.mark.parametrize("input_size, target_size, named", [
    ("100", VOCAB, "input_vocab_size='100'"),
    (VOCAB, 0, "target_vocab_size=0"),
    (VOCAB, 29.0, "target_vocab_size=29.0"),
    (True, VOCAB, "input_vocab_size=True"),
])
def test_a_vocabulary_size_that_is_not_a_positive_whole_number_is_an_error(
        input_size, target_size, named):
    with pytest.raises(ConfigurationError) as error:
        Transformer(_hparams(), input_size, target_size)
    assert str(error.value) == (f"Transformer's {named} must be the size of a vocabulary: a "
                                f"whole number, 1 or more.")


def test_a_numpy_vocabulary_size_builds():
    model = Transformer(_hparams(), np.int64(VOCAB), np.int32(VOCAB))
    assert (model.input_vocab_size, model.target_vocab_size) == (VOCAB, VOCAB)


def _hand_weight_count(num_layers, d=64, d_ff=256):
    """V·d (one shared matrix) + N encoder layers + N decoder layers; attention has no biases."""
    attention = 4 * d * d
    ffn = d * d_ff + d_ff + d_ff * d + d
    norm = 2 * d
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    return VOCAB * d + num_layers * (encoder_layer + decoder_layer)


def test_tiny_model_weight_count(tiny_model):
    """transformer_tiny (d=64, d_ff=256, h=4, N=2) has exactly the hand-counted parameters."""
    assert tiny_model.count_params() == _hand_weight_count(num_layers=2)


def test_pre_norm_model_adds_one_final_norm_per_stack():
    """Pre-norm leaves each stack unnormalised, so each stack gets one extra LayerNorm (2·d)."""
    model = _model(normalize_first=True, num_hidden_layers=1)
    assert model.encoder_final_norm is not None and model.decoder_final_norm is not None
    assert model.count_params() == _hand_weight_count(num_layers=1) + 2 * (2 * 64)


def test_learned_position_embeddings_are_trainable_tables():
    """position_encoding=learned gives each stack its own trainable [max_length, d] table
    (Table 3 row E) in place of the sinusoids."""
    model = _model(position_encoding="learned", num_hidden_layers=1)
    hp = model.hparams
    tables = [
        model.encoder_position.position_embeddings,
        model.decoder_position.position_embeddings,
    ]
    trainable = {id(v) for v in model.trainable_variables}
    for table in tables:
        assert tuple(table.shape) == (hp.max_length, hp.hidden_size)
        assert table.trainable and id(table) in trainable
    assert tables[0] is not tables[1]
    assert model(FEATURES, training=False).shape == (2, 5, VOCAB)


def test_learned_positions_reject_sequences_longer_than_the_table(monkeypatch):
    """max_length=7 rows: 7 positions encode and decode; 8 raise a ValueError naming
    max_length=7 before any computation (no embedding is looked up)."""
    model = _model(position_encoding="learned", num_hidden_layers=1, max_length=7)
    assert model.max_positions == 7
    fits = np.full((2, 7), 5, "int32")
    memory, memory_mask = model.encode(fits, training=False)
    assert model.decode(fits, memory, memory_mask, training=False).shape == (2, 7, VOCAB)
    lookups = []
    monkeypatch.setattr(SharedEmbedding, "call", lambda self, ids: lookups.append(ids))
    too_long = np.full((2, 8), 5, "int32")
    with pytest.raises(ValueError, match=r"source has 8 positions.*max_length=7"):
        model.encode(too_long, training=False)
    with pytest.raises(ValueError, match=r"decoder input has 8 positions.*max_length=7"):
        model.decode(too_long, memory, memory_mask, training=False)
    assert not lookups


def test_sinusoidal_positions_ignore_max_length():
    """Sinusoids have no table: sequences longer than hparam max_length are fine."""
    model = _model(num_hidden_layers=1, max_length=7)
    assert model.max_positions is None
    long_ids = np.full((1, 12), 5, "int32")
    assert model({"inputs": long_ids, "targets": long_ids}, training=False).shape == (1, 12,
                                                                                      VOCAB)


def test_unknown_position_encoding_is_an_error():
    """A misspelt position_encoding fails at construction with the allowed values."""
    with pytest.raises(ValueError, match="position_encoding"):
        Transformer(_hparams(position_encoding="sinusoid"), VOCAB, VOCAB)


def test_embedding_dropout_only_in_training():
    """Dropout on embeddings + positions (and residuals) is active in training only."""
    model = _model(layer_prepostprocess_dropout=0.1, num_hidden_layers=1)
    inference = _np(model(FEATURES, training=False))
    np.testing.assert_allclose(_np(model(FEATURES)), inference, atol=1e-6)
    assert not np.allclose(_np(model(FEATURES, training=True)), inference)


@pytest.mark.parametrize(
    "overrides",
    [
        {"num_hidden_layers": 1},
        {
            "num_hidden_layers": 1,
            "normalize_first": True,
            "position_encoding": "learned",
            "shared_embedding_and_softmax_weights": False,
        },
    ],
)
def test_model_config_round_trip(overrides):
    """Transformer.from_config(get_config()) gives an equal config, and with the weights
    copied, identical logits."""
    model = _model(**overrides)
    config = model.get_config()
    restored = Transformer.from_config(config)
    assert restored.get_config() == config
    assert restored.hparams == model.hparams
    keras.utils.set_random_seed(1)
    restored.build_weights()
    restored.set_weights(model.get_weights())
    np.testing.assert_array_equal(
        _np(restored(FEATURES, training=False)), _np(model(FEATURES, training=False))
    )
