"""Encoder and decoder layers (paper §3.1), and config round trips for every layer class."""

import keras
import numpy as np
import pytest
from keras import ops

from t2t_repro.layers import (
    LearnedPositionEmbedding,
    MultiHeadAttention,
    PositionwiseFeedForward,
    SharedEmbedding,
    SinusoidalPositionEncoding,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
    causal_mask,
    padding_mask,
)

_RNG = np.random.default_rng(0)
_X = _RNG.standard_normal((2, 5, 8)).astype("float32")
_MEMORY = _RNG.standard_normal((2, 6, 8)).astype("float32")
_SOURCE_IDS = np.array([[3, 4, 5, 6, 0, 0], [1, 2, 3, 4, 5, 6]])
_IDS = np.array([[1, 4, 9, 0], [2, 2, 10, 3]])


# (layer factory, call on a layer) per layer class; every argument set away from its default.
ROUND_TRIP_CASES = {
    "multi_head_attention": (
        lambda: MultiHeadAttention(
            num_heads=2, key_dim=3, value_dim=5, output_dim=7, dropout=0.1, name="mha"
        ),
        lambda layer: layer(_X, _MEMORY, attention_mask=padding_mask(_SOURCE_IDS)),
    ),
    "positionwise_feed_forward": (
        lambda: PositionwiseFeedForward(intermediate_dim=12, output_dim=6, dropout=0.2),
        lambda layer: layer(_X),
    ),
    "shared_embedding": (
        lambda: SharedEmbedding(vocab_size=11, hidden_size=8),
        lambda layer: ops.concatenate([layer(_IDS), layer.logits(layer(_IDS))], axis=-1),
    ),
    "sinusoidal_position_encoding": (
        lambda: SinusoidalPositionEncoding(name="positions"),
        lambda layer: layer(_X, start_index=3),
    ),
    "learned_position_embedding": (
        lambda: LearnedPositionEmbedding(max_length=9, hidden_size=8),
        lambda layer: layer(_X, start_index=2),
    ),
    "encoder_layer_post_norm": (
        lambda: TransformerEncoderLayer(
            hidden_size=8, num_heads=2, intermediate_dim=16, key_dim=3, value_dim=5,
            dropout=0.2, attention_dropout=0.1, relu_dropout=0.1, layer_norm_epsilon=1e-5,
        ),
        lambda layer: layer(_X, attention_mask=padding_mask(_SOURCE_IDS[:, :5])),
    ),
    "encoder_layer_pre_norm": (
        lambda: TransformerEncoderLayer(
            hidden_size=8, num_heads=2, intermediate_dim=16, normalize_first=True
        ),
        lambda layer: layer(_X),
    ),
    "decoder_layer": (
        lambda: TransformerDecoderLayer(
            hidden_size=8, num_heads=4, intermediate_dim=16, key_dim=3, dropout=0.0,
            normalize_first=True, name="decoder",
        ),
        lambda layer: layer(
            _X, _MEMORY, self_attention_mask=causal_mask(5), memory_mask=padding_mask(_SOURCE_IDS)
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(ROUND_TRIP_CASES))
def test_config_round_trip(case):
    """from_config(get_config()) rebuilds an equal config, and with the weights copied over the
    rebuilt layer computes the same outputs (inference mode, so dropout is off)."""
    make_layer, run = ROUND_TRIP_CASES[case]
    keras.utils.set_random_seed(0)
    layer = make_layer()
    expected = ops.convert_to_numpy(run(layer))
    config = layer.get_config()

    keras.utils.set_random_seed(1)  # a different initialisation, so the weight copy matters
    restored = type(layer).from_config(config)
    assert restored.get_config() == config
    run(restored)
    assert len(restored.weights) == len(layer.weights)
    restored.set_weights(layer.get_weights())
    np.testing.assert_array_equal(ops.convert_to_numpy(run(restored)), expected)


def test_round_trip_cases_cover_every_layer_class():
    """Each layer class the package exports appears in the round-trip cases above."""
    classes = {type(make_layer()) for make_layer, _ in ROUND_TRIP_CASES.values()}
    assert classes == {
        MultiHeadAttention,
        PositionwiseFeedForward,
        SharedEmbedding,
        SinusoidalPositionEncoding,
        LearnedPositionEmbedding,
        TransformerEncoderLayer,
        TransformerDecoderLayer,
    }


D_MODEL, HEADS, D_FF = 512, 8, 2048
# W^Q, W^K, W^V and W^O, each d_model × d_model since h·d_k = h·d_v = d_model; no biases.
ATTENTION_PARAMS = 4 * D_MODEL * D_MODEL
FFN_PARAMS = D_MODEL * D_FF + D_FF + D_FF * D_MODEL + D_MODEL  # W1, b1, W2, b2
NORM_PARAMS = 2 * D_MODEL  # gamma and beta


def test_encoder_layer_weight_count():
    """Base encoder layer: one attention, one FFN, two LayerNorms = 3,150,336 parameters."""
    layer = TransformerEncoderLayer(hidden_size=D_MODEL, num_heads=HEADS, intermediate_dim=D_FF)
    layer.build((None, None, D_MODEL))
    expected = ATTENTION_PARAMS + FFN_PARAMS + 2 * NORM_PARAMS
    assert expected == 3_150_336
    assert layer.count_params() == expected


def test_decoder_layer_weight_count():
    """Base decoder layer: self- and cross-attention, one FFN, three LayerNorms = 4,199,936."""
    layer = TransformerDecoderLayer(hidden_size=D_MODEL, num_heads=HEADS, intermediate_dim=D_FF)
    layer.build((None, None, D_MODEL), (None, None, D_MODEL))
    expected = 2 * ATTENTION_PARAMS + FFN_PARAMS + 3 * NORM_PARAMS
    assert expected == 4_199_936
    assert layer.count_params() == expected


def test_key_and_value_dims_set_attention_weight_count():
    """With d_k = 16 and d_v = 32 per head (h = 8), W^Q,W^K are 512×128 and W^V,W^O 512×256."""
    layer = TransformerEncoderLayer(
        hidden_size=D_MODEL, num_heads=HEADS, intermediate_dim=D_FF, key_dim=16, value_dim=32
    )
    layer.build((None, None, D_MODEL))
    attention = 2 * D_MODEL * HEADS * 16 + 2 * D_MODEL * HEADS * 32
    assert layer.count_params() == attention + FFN_PARAMS + 2 * NORM_PARAMS


def _offset_input(seed=0):
    """Inputs far from zero mean / unit variance, so a normalised output is not an accident."""
    rng = np.random.default_rng(seed)
    return (3.0 + 5.0 * rng.standard_normal((2, 5, 16))).astype("float32")


def _assert_normalised_per_position(output):
    output = ops.convert_to_numpy(output)
    np.testing.assert_allclose(output.mean(-1), 0.0, atol=1e-5)
    np.testing.assert_allclose(output.std(-1), 1.0, atol=1e-3)


def test_post_norm_encoder_output_is_layer_normalised():
    """Post-norm (the paper) ends in LayerNorm: with gamma=1, beta=0 every position of the output
    has mean 0 and std 1."""
    keras.utils.set_random_seed(0)
    layer = TransformerEncoderLayer(hidden_size=16, num_heads=4, intermediate_dim=32)
    _assert_normalised_per_position(layer(_offset_input(), training=False))


def test_post_norm_decoder_output_is_layer_normalised():
    """The decoder's last sublayer is also wrapped in LayerNorm(x + Sublayer(x))."""
    keras.utils.set_random_seed(0)
    layer = TransformerDecoderLayer(hidden_size=16, num_heads=4, intermediate_dim=32)
    memory = _offset_input(seed=1)
    output = layer(_offset_input(), memory, self_attention_mask=causal_mask(5), training=False)
    _assert_normalised_per_position(output)


def test_post_norm_encoder_equals_manual_composition():
    """Post-norm is LayerNorm(h + FFN(h)) with h = LayerNorm(x + SelfAttention(x)), composed
    here from the layer's own sublayers."""
    keras.utils.set_random_seed(0)
    layer = TransformerEncoderLayer(hidden_size=16, num_heads=4, intermediate_dim=32)
    x, mask = _offset_input(), padding_mask(np.array([[1, 2, 3, 0, 0], [1, 2, 3, 4, 5]]))
    output = layer(x, attention_mask=mask, training=False)
    h = layer.self_attention_norm(x + layer.self_attention(x, attention_mask=mask))
    expected = layer.feed_forward_norm(h + layer.feed_forward(h))
    np.testing.assert_allclose(
        ops.convert_to_numpy(output), ops.convert_to_numpy(expected), atol=1e-5
    )


def test_pre_norm_encoder_equals_manual_composition():
    """Pre-norm: x + Sublayer(LayerNorm(x)) for each sublayer; the output is not normalised."""
    keras.utils.set_random_seed(0)
    layer = TransformerEncoderLayer(
        hidden_size=16, num_heads=4, intermediate_dim=32, normalize_first=True
    )
    x, mask = _offset_input(), padding_mask(np.array([[1, 2, 3, 0, 0], [1, 2, 3, 4, 5]]))
    output = ops.convert_to_numpy(layer(x, attention_mask=mask, training=False))
    h = x + layer.self_attention(layer.self_attention_norm(x), attention_mask=mask)
    expected = h + layer.feed_forward(layer.feed_forward_norm(h))
    np.testing.assert_allclose(output, ops.convert_to_numpy(expected), atol=1e-4)
    assert abs(output.std(-1).mean() - 1.0) > 0.5


def test_pre_norm_decoder_equals_manual_composition():
    """Pre-norm decoder: masked self-attention, cross-attention to memory, FFN, each as
    x + Sublayer(LayerNorm(x))."""
    keras.utils.set_random_seed(0)
    layer = TransformerDecoderLayer(
        hidden_size=16, num_heads=4, intermediate_dim=32, normalize_first=True
    )
    x, memory = _offset_input(), _offset_input(seed=1)
    self_mask = causal_mask(5)
    memory_mask = padding_mask(np.array([[1, 2, 0, 0, 0], [1, 2, 3, 4, 5]]))
    output = layer(x, memory, self_attention_mask=self_mask, memory_mask=memory_mask)
    h = x + layer.self_attention(layer.self_attention_norm(x), attention_mask=self_mask)
    h = h + layer.cross_attention(layer.cross_attention_norm(h), memory, attention_mask=memory_mask)
    expected = h + layer.feed_forward(layer.feed_forward_norm(h))
    np.testing.assert_allclose(
        ops.convert_to_numpy(output), ops.convert_to_numpy(expected), atol=1e-4
    )


def test_decoder_layer_with_causal_mask_ignores_later_positions():
    """With the causal mask, output at position i depends on inputs at positions <= i only."""
    keras.utils.set_random_seed(0)
    layer = TransformerDecoderLayer(hidden_size=8, num_heads=2, intermediate_dim=16, dropout=0.0)
    changed = _X.copy()
    changed[:, 3] += 1.0
    before = ops.convert_to_numpy(layer(_X, _MEMORY, self_attention_mask=causal_mask(5)))
    after = ops.convert_to_numpy(layer(changed, _MEMORY, self_attention_mask=causal_mask(5)))
    np.testing.assert_allclose(after[:, :3], before[:, :3], atol=1e-6)
    assert not np.allclose(after[:, 3:], before[:, 3:])


def test_layers_return_attention_scores():
    """Encoder returns self-attention weights; decoder returns {'self', 'cross'} weights, with
    the causal pattern in 'self' and zero weight on padded memory in 'cross'."""
    keras.utils.set_random_seed(0)
    encoder = TransformerEncoderLayer(hidden_size=8, num_heads=2, intermediate_dim=16)
    _, scores = encoder(_X, return_attention_scores=True)
    assert scores.shape == (2, 2, 5, 5)

    decoder = TransformerDecoderLayer(hidden_size=8, num_heads=2, intermediate_dim=16)
    _, scores = decoder(
        _X,
        _MEMORY,
        self_attention_mask=causal_mask(5),
        memory_mask=padding_mask(_SOURCE_IDS),
        return_attention_scores=True,
    )
    self_scores = ops.convert_to_numpy(scores["self"])
    cross_scores = ops.convert_to_numpy(scores["cross"])
    assert self_scores.shape == (2, 2, 5, 5) and cross_scores.shape == (2, 2, 5, 6)
    future_rows, future_cols = np.triu_indices(5, k=1)
    assert np.all(self_scores[..., future_rows, future_cols] == 0.0)
    assert np.all(cross_scores[0, ..., 4:] == 0.0)
