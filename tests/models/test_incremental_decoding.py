"""Incremental (cached) decoding: one position per step equals the full forward pass.

The decoder's self-attention keys and values are written into a preallocated cache one
position at a time, and the encoder-decoder keys and values are projected once per sentence;
neither may change what the model predicts.
"""

import keras
import numpy as np
import pytest
from keras import ops

from t2t_repro.hparams import create_hparams
from t2t_repro.layers import TransformerDecoderLayer, causal_mask
from t2t_repro.models.transformer import Transformer, shift_right

# Attention over a single key (the first position) is legitimate here.
pytestmark = pytest.mark.filterwarnings("ignore:You are using a softmax over axis -1")

VOCAB = 29
# Row 0 is a padded source: its padding must be masked identically in both decoders.
INPUTS = np.array([[5, 7, 9, 3, 1, 0, 0], [4, 2, 8, 11, 12, 6, 1]], dtype="int32")
TARGETS = np.array([[6, 3, 8, 1, 0, 0], [9, 9, 2, 4, 17, 1]], dtype="int32")
TOLERANCE = 1e-4


def _model(seed=0, input_vocab_size=VOCAB, target_vocab_size=VOCAB, **overrides):
    """transformer_tiny without dropout plus `overrides`, weights built from `seed`."""
    overrides = {"layer_prepostprocess_dropout": 0.0, **overrides}
    hparams = create_hparams(
        "transformer_tiny", ",".join(f"{key}={value}" for key, value in overrides.items())
    )
    keras.utils.set_random_seed(seed)
    return Transformer(hparams, input_vocab_size, target_vocab_size).build_weights()


def _incremental_logits(model, inputs, decoder_inputs, cache_length=None):
    """[batch, t, vocab] from `decode_step`, one position at a time."""
    memory, memory_mask = model.encode(inputs, training=False)
    memory_key_values = model.memory_key_values(memory)
    batch, length = decoder_inputs.shape
    cache = model.empty_decode_cache(batch, cache_length or length)
    steps = []
    for position in range(length):
        logits, cache = model.decode_step(
            ops.convert_to_tensor(decoder_inputs[:, position]), position, cache,
            memory_key_values, memory_mask,
        )
        steps.append(ops.convert_to_numpy(logits))
    return np.stack(steps, axis=1)


def _full_logits(model, inputs, decoder_inputs):
    memory, memory_mask = model.encode(inputs, training=False)
    return ops.convert_to_numpy(
        model.decode(decoder_inputs, memory, memory_mask, training=False)
    )


@pytest.mark.parametrize(
    "overrides, input_vocab_size",
    [
        pytest.param({}, VOCAB, id="post_norm-sinusoidal"),
        pytest.param({"normalize_first": True}, VOCAB, id="pre_norm-sinusoidal"),
        pytest.param({"position_encoding": "learned"}, VOCAB, id="post_norm-learned"),
        pytest.param(
            {"normalize_first": True, "position_encoding": "learned"}, VOCAB,
            id="pre_norm-learned",
        ),
        pytest.param(
            {"shared_source_target_embedding": False,
             "shared_embedding_and_softmax_weights": False},
            VOCAB + 6,
            id="separate_embeddings_and_softmax",
        ),
        pytest.param(
            {"num_encoder_layers": 1, "num_decoder_layers": 3}, VOCAB,
            id="3_decoder_layers_1_encoder_layer",
        ),
        # Restricted self-attention: the cache is a ring of 2 positions, rewritten 3 times.
        pytest.param({"self_attention_window": 2}, VOCAB, id="restricted_window_2"),
    ],
)
def test_cached_step_logits_equal_full_forward_pass_at_every_position(
    overrides, input_vocab_size
):
    model = _model(input_vocab_size=input_vocab_size, **overrides)
    decoder_inputs = ops.convert_to_numpy(shift_right(TARGETS))
    full = _full_logits(model, INPUTS, decoder_inputs)
    incremental = _incremental_logits(model, INPUTS, decoder_inputs)
    assert incremental.shape == (2, TARGETS.shape[1], VOCAB)
    for position in range(TARGETS.shape[1]):
        np.testing.assert_allclose(
            incremental[:, position], full[:, position], atol=TOLERANCE,
            err_msg=f"position {position}",
        )


def test_cache_longer_than_the_prefix_changes_nothing():
    """Search preallocates the cache to the longest output; unwritten slots must be masked."""
    model = _model()
    decoder_inputs = ops.convert_to_numpy(shift_right(TARGETS))
    np.testing.assert_allclose(
        _incremental_logits(model, INPUTS, decoder_inputs, cache_length=32),
        _full_logits(model, INPUTS, decoder_inputs),
        atol=TOLERANCE,
    )


def test_source_padding_is_masked_in_the_cached_decoder():
    """A row's predictions do not depend on how much padding follows its source."""
    model = _model()
    decoder_inputs = ops.convert_to_numpy(shift_right(TARGETS[:1]))
    short = _incremental_logits(model, INPUTS[:1, :5], decoder_inputs)
    padded = _incremental_logits(model, np.pad(INPUTS[:1, :5], ((0, 0), (0, 11))), decoder_inputs)
    np.testing.assert_allclose(short, padded, atol=TOLERANCE)


def _count_calls(monkeypatch, layer, counter, key):
    original = layer.call

    def counting_call(*args, **kwargs):
        counter[key] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(layer, "call", counting_call)


def test_memory_is_projected_once_per_sentence_not_per_step(monkeypatch):
    """`decode_step` reads the precomputed encoder-decoder keys and values: it neither reruns
    the encoder nor projects the memory again, so a step costs one position whatever the
    source length."""
    model = _model(num_encoder_layers=2, num_decoder_layers=3)
    counts = {"encoder": 0, "cross_key": 0, "cross_value": 0}
    for layer in model.encoder_layers:
        _count_calls(monkeypatch, layer, counts, "encoder")
    for layer in model.decoder_layers:
        _count_calls(monkeypatch, layer.cross_attention.key_dense, counts, "cross_key")
        _count_calls(monkeypatch, layer.cross_attention.value_dense, counts, "cross_value")

    memory, memory_mask = model.encode(INPUTS, training=False)
    memory_key_values = model.memory_key_values(memory)
    assert counts == {"encoder": 2, "cross_key": 3, "cross_value": 3}

    cache = model.empty_decode_cache(2, 4)
    for position in range(4):
        _, cache = model.decode_step(
            ops.convert_to_tensor(TARGETS[:, position]), position, cache, memory_key_values,
            memory_mask,
        )
    assert counts == {"encoder": 2, "cross_key": 3, "cross_value": 3}


def test_decode_step_uses_the_given_memory_key_values():
    """The cross-attention reads only `memory_key_values`: those of another source give that
    source's full-pass logits."""
    model = _model()
    other_inputs = INPUTS[::-1].copy()
    memory, memory_mask = model.encode(other_inputs, training=False)
    cache = model.empty_decode_cache(2, 3)
    logits, _ = model.decode_step(
        ops.zeros((2,), "int32"), 0, cache, model.memory_key_values(memory), memory_mask
    )
    expected = _full_logits(model, other_inputs, np.zeros((2, 1), "int32"))[:, 0]
    np.testing.assert_allclose(ops.convert_to_numpy(logits), expected, atol=TOLERANCE)
    own = _full_logits(model, INPUTS, np.zeros((2, 1), "int32"))[:, 0]
    assert not np.allclose(ops.convert_to_numpy(logits), own, atol=TOLERANCE)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_decoder_layer_decode_step_equals_causal_call(normalize_first):
    """The layer alone: position by position through the cache equals one call under the
    causal mask, and the cache ends up holding every position's projected keys and values."""
    hidden, heads, length, source_length, cache_length = 16, 2, 5, 4, 8
    keras.utils.set_random_seed(1)
    layer = TransformerDecoderLayer(
        hidden_size=hidden, num_heads=heads, intermediate_dim=32, dropout=0.0,
        normalize_first=normalize_first,
    )
    x = keras.random.normal((2, length, hidden), seed=2)
    memory = keras.random.normal((2, source_length, hidden), seed=3)
    # Row 0 sees only its first two source positions.
    memory_mask = np.array([[[True, True, False, False]], [[True] * 4]])
    expected = ops.convert_to_numpy(
        layer(x, memory, self_attention_mask=causal_mask(length), memory_mask=memory_mask)
    )

    key_dim = hidden // heads
    cache = (ops.zeros((2, heads, 1, cache_length, key_dim)),
             ops.zeros((2, heads, 1, cache_length, key_dim)))
    memory_key_value = layer.cross_attention.project_key_value(memory)
    outputs = []
    for position in range(length):
        output, cache = layer.decode_step(
            x[:, position : position + 1], position, cache, memory_key_value, memory_mask
        )
        assert output.shape == (2, 1, hidden)
        outputs.append(ops.convert_to_numpy(output))
    np.testing.assert_allclose(np.concatenate(outputs, axis=1), expected, atol=TOLERANCE)

    # Self-attention's input is x itself under post-norm, LayerNorm(x) under pre-norm.
    attended = layer.self_attention_norm(x) if normalize_first else x
    keys, values = layer.self_attention.project_key_value(attended)
    cached_keys, cached_values = (ops.convert_to_numpy(tensor)[:, :, 0] for tensor in cache)
    np.testing.assert_allclose(cached_keys[:, :, :length], keys, atol=TOLERANCE)
    np.testing.assert_allclose(cached_values[:, :, :length], values, atol=TOLERANCE)
    assert not cached_keys[:, :, length:].any() and not cached_values[:, :, length:].any()


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("window", [0, 2])
def test_reordered_hypotheses_read_their_own_prefixes_without_copying_the_cache(window, graph):
    """Beam layout: hypotheses reordered at random after every step (`reorder_decode_cache`
    moves only `slots`) still get the full pass's logits over their own prefixes, and the
    cached keys and values are never copied between slots; with a window of 2, in a ring of
    2 positions that each step overwrites. In a TensorFlow graph a step reads the positions
    written so far only (`layers.cache_reads`), eagerly all of them."""
    if graph and keras.backend.backend() != "tensorflow":
        pytest.skip("a plain TensorFlow graph")
    model = _model(self_attention_window=window)
    decode_step = model.decode_step
    if graph:
        import tensorflow as tf

        decode_step = tf.function(model.decode_step)
    beam, length = 3, 5
    rng = np.random.default_rng(4)
    memory, memory_mask = model.encode(INPUTS, training=False)
    memory_key_values = model.memory_key_values(memory)
    cache = model.empty_decode_cache(len(INPUTS), length, beam_size=beam)
    prefixes = np.zeros((len(INPUTS), beam, 1), np.int32)  # every hypothesis starts with id 0
    for position in range(length):
        logits, cache = decode_step(ops.convert_to_tensor(prefixes[:, :, -1]),
                                    ops.convert_to_tensor(position), cache, memory_key_values,
                                    memory_mask)
        for hypothesis in range(beam):
            full = _full_logits(model, INPUTS, prefixes[:, hypothesis])[:, -1]
            np.testing.assert_allclose(ops.convert_to_numpy(logits[:, hypothesis]), full,
                                       atol=TOLERANCE, err_msg=f"position {position}")
        index = position % (window or length)
        written = [ops.convert_to_numpy(keys)[:, :, :, index] for keys, _ in
                   cache["keys_values"]]
        parents = rng.integers(0, beam, size=(len(INPUTS), beam)).astype(np.int32)
        cache = model.reorder_decode_cache(cache, parents)
        assert all(np.array_equal(ops.convert_to_numpy(keys)[:, :, :, index], before)
                   for (keys, _), before in zip(cache["keys_values"], written))
        chosen = np.take_along_axis(prefixes, parents[:, :, None], axis=1)
        prefixes = np.concatenate([chosen, rng.integers(2, 10, size=(len(INPUTS), beam, 1))],
                                  axis=2).astype(np.int32)


def test_restricted_cache_holds_only_the_window():
    """With self_attention_window = r the cache keeps min(r, length) positions per slot."""
    model = _model(self_attention_window=3)
    cache = model.empty_decode_cache(2, 40, beam_size=4)
    assert cache["slots"].shape == (2, 4, 3)
    assert all(keys.shape[3] == 3 == values.shape[3] for keys, values in cache["keys_values"])
    assert model.empty_decode_cache(2, 2)["slots"].shape == (2, 1, 2)


def test_window_of_at_least_the_length_equals_the_full_model():
    """Restricted self-attention adds no weights: the same seed builds the same model, and a
    window as long as the sequences changes no logit; a window of 2 does."""
    decoder_inputs = ops.convert_to_numpy(shift_right(TARGETS))
    full = _full_logits(_model(), INPUTS, decoder_inputs)
    wide = _full_logits(_model(self_attention_window=INPUTS.shape[1]), INPUTS, decoder_inputs)
    np.testing.assert_allclose(wide, full, atol=TOLERANCE)
    narrow = _full_logits(_model(self_attention_window=2), INPUTS, decoder_inputs)
    assert not np.allclose(narrow, full, atol=TOLERANCE)
