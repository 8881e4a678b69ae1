"""Restricted self-attention (paper Table 1, row 4): a position attends to positions fewer than r
away, computed block by block, against full attention under a band mask built in NumPy."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops
from test_attention import _np_multi_head

from t2t_repro.layers import (
    MultiHeadAttention,
    TransformerEncoderLayer,
    band_mask,
    padding_mask,
)


def _np_band(length, window, causal):
    """|i - j| < window, and j <= i when causal, written out with NumPy."""
    i, j = np.meshgrid(np.arange(length), np.arange(length), indexing="ij")
    band = np.abs(i - j) < window
    return band & (j <= i) if causal else band


@pytest.mark.parametrize("length, window", [(1, 1), (6, 1), (6, 2), (7, 3), (5, 9)])
@pytest.mark.parametrize("causal", [False, True])
def test_band_mask_equals_numpy_reference(length, window, causal):
    np.testing.assert_array_equal(ops.convert_to_numpy(band_mask(length, window, causal)),
                                  _np_band(length, window, causal))


# Row 0 ends in three padding positions, row 1 has none; 11 positions span several blocks.
IDS = np.array([[4] * 8 + [0] * 3, [5] * 11])


# NumPy's reference gives padding queries with no key in reach rows of NaN, which are skipped.
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("window", [1, 2, 3, 4, 11, 20])
@pytest.mark.parametrize("causal", [False, True])
def test_restricted_attention_equals_full_attention_under_the_numpy_band(window, causal):
    """The block-wise layer equals the paper's MultiHead rebuilt from its kernels in NumPy
    with the band (and padding) mask, at every real position; its weights, when asked for,
    are zero outside the band and sum to 1."""
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(window).standard_normal((2, 11, 8)).astype("float32")
    layer = MultiHeadAttention(num_heads=2, key_dim=4, window=window)
    output = ops.convert_to_numpy(layer(x, attention_mask=padding_mask(IDS),
                                        use_causal_mask=causal))
    mask = _np_band(11, window, causal)[None] & (IDS != 0)[:, None, :]
    expected, expected_weights = _np_multi_head(layer, x, x, mask)
    real = IDS != 0
    np.testing.assert_allclose(output[real], expected[real], atol=1e-5)

    _, weights = layer(x, attention_mask=padding_mask(IDS), use_causal_mask=causal,
                       return_attention_scores=True)
    # [batch, query, heads, key] at the real queries (NumPy's padding rows are all -inf).
    weights = ops.convert_to_numpy(weights).transpose(0, 2, 1, 3)[real]
    np.testing.assert_allclose(weights, expected_weights.transpose(0, 2, 1, 3)[real], atol=1e-6)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    assert np.all(weights[np.broadcast_to(~mask[real][:, None], weights.shape)] == 0.0)


@pytest.mark.parametrize("causal", [False, True])
def test_window_of_at_least_the_length_equals_full_attention(causal):
    keras.utils.set_random_seed(1)
    x = np.random.default_rng(1).standard_normal((2, 6, 8)).astype("float32")
    full = MultiHeadAttention(num_heads=2, key_dim=4)
    full_output = full(x, use_causal_mask=causal)
    for window in (6, 7, 64):
        restricted = MultiHeadAttention(num_heads=2, key_dim=4, window=window)
        restricted(x)
        restricted.set_weights(full.get_weights())
        np.testing.assert_allclose(ops.convert_to_numpy(restricted(x, use_causal_mask=causal)),
                                   ops.convert_to_numpy(full_output), atol=1e-5)


def test_restricted_attention_in_a_graph_with_unknown_length():
    """Traced once with unknown batch and length (as training and export trace it), the
    block-wise path gives the eager full-square result for other lengths too."""
    keras.utils.set_random_seed(2)
    layer = MultiHeadAttention(num_heads=2, key_dim=4, window=3)
    layer(np.zeros((1, 4, 8), "float32"))
    traced = tf.function(lambda x: layer(x, use_causal_mask=True),
                         input_signature=[tf.TensorSpec([None, None, 8], tf.float32)])
    for length in (2, 7, 10):
        x = np.random.default_rng(length).standard_normal((3, length, 8)).astype("float32")
        expected, _ = _np_multi_head(layer, x, x, _np_band(length, 3, causal=True))
        np.testing.assert_allclose(traced(x).numpy(), expected, atol=1e-5)


def test_query_dependent_mask_with_a_window_is_an_error_naming_the_fix():
    layer = MultiHeadAttention(num_heads=2, key_dim=4, window=2)
    x = np.zeros((1, 5, 8), "float32")
    with pytest.raises(ValueError, match=r"key mask \[batch, 1, length\].*use_causal_mask"):
        layer(x, attention_mask=np.tril(np.ones((1, 5, 5), bool)))
    with pytest.raises(ValueError, match="window must be >= 0"):
        MultiHeadAttention(num_heads=2, key_dim=4, window=-1)


def test_encoder_layer_passes_its_window_on_and_round_trips_it():
    layer = TransformerEncoderLayer(hidden_size=8, num_heads=2, intermediate_dim=16,
                                    self_attention_window=3)
    assert layer.self_attention.window == 3
    restored = TransformerEncoderLayer.from_config(layer.get_config())
    assert restored.self_attention_window == 3 and restored.self_attention.window == 3


def test_a_negative_window_hparam_is_an_hparams_error_naming_it():
    """The trainer and decoder report HParamsError as one `error:` line."""
    from t2t_repro.hparams import HParamsError, create_hparams
    from t2t_repro.models.transformer import Transformer

    with pytest.raises(HParamsError, match="hparam self_attention_window=-2 must be at least 0"):
        Transformer(create_hparams("transformer_tiny", "self_attention_window=-2"), 12, 12)
