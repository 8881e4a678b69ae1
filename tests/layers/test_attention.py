"""Scaled dot-product attention, multi-head attention and the boolean masks (paper §3.2)."""

import math
import subprocess
import sys
import warnings

import keras
import numpy as np
import pytest
from keras import ops

from t2t_repro.layers import (
    MultiHeadAttention,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
)


def _np_softmax(logits, axis=-1):
    shifted = logits - logits.max(axis=axis, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=axis, keepdims=True)


def _np_attention(q, k, v, mask=None):
    """softmax(QKᵀ/√d_k)V, with masked-out logits set to -inf."""
    logits = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        logits = np.where(mask, logits, -np.inf)
    weights = _np_softmax(logits)
    return weights @ v, weights


def _np_multi_head(layer, query, value, mask=None):
    """The paper's MultiHead built from the layer's own kernels: split, attend, concat, W^O."""
    h, dk, dv = layer.num_heads, layer.key_dim, layer.value_dim
    wq = ops.convert_to_numpy(layer.query_dense.kernel)
    wk = ops.convert_to_numpy(layer.key_dense.kernel)
    wv = ops.convert_to_numpy(layer.value_dense.kernel)
    wo = ops.convert_to_numpy(layer.output_dense.kernel)
    heads, head_weights = [], []
    for i in range(h):
        q = query @ wq[:, i * dk : (i + 1) * dk]
        k = value @ wk[:, i * dk : (i + 1) * dk]
        v = value @ wv[:, i * dv : (i + 1) * dv]
        out, weights = _np_attention(q, k, v, mask)
        heads.append(out)
        head_weights.append(weights)
    return np.concatenate(heads, axis=-1) @ wo, np.stack(head_weights, axis=1)


def _random(rng, *shape):
    return rng.standard_normal(shape).astype("float32")


def test_scaled_dot_product_attention_matches_numpy_reference():
    """Unmasked attention equals softmax(QKᵀ/√d_k)V computed by hand, weights included."""
    rng = np.random.default_rng(0)
    q, k, v = _random(rng, 2, 3, 4, 8), _random(rng, 2, 3, 6, 8), _random(rng, 2, 3, 6, 5)
    output, weights = scaled_dot_product_attention(q, k, v)
    expected_output, expected_weights = _np_attention(q, k, v)
    np.testing.assert_allclose(ops.convert_to_numpy(weights), expected_weights, atol=1e-6)
    np.testing.assert_allclose(ops.convert_to_numpy(output), expected_output, atol=1e-5)


def test_scaled_dot_product_attention_with_mask_gives_masked_keys_zero_weight():
    """Masked (False) connections behave as -inf logits: exactly zero weight, rest renormalised."""
    rng = np.random.default_rng(1)
    q, k, v = _random(rng, 2, 4, 8), _random(rng, 2, 6, 8), _random(rng, 2, 6, 3)
    mask = rng.random((2, 4, 6)) > 0.5
    mask[..., 0] = True  # every query keeps at least one legal key
    output, weights = scaled_dot_product_attention(q, k, v, mask=ops.convert_to_tensor(mask))
    weights = ops.convert_to_numpy(weights)
    expected_output, expected_weights = _np_attention(q, k, v, mask)
    assert np.all(weights[~mask] == 0.0)
    np.testing.assert_allclose(weights, expected_weights, atol=1e-6)
    np.testing.assert_allclose(ops.convert_to_numpy(output), expected_output, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_fully_masked_query_stays_finite(dtype):
    """A query with no legal key (e.g. a padding query) must not produce NaNs that could leak,
    in 16-bit inputs too (float16 overflows to -inf at -65520): the mask and softmax are
    float32, the output keeps the inputs' dtype."""
    rng = np.random.default_rng(2)
    q, k, v = (ops.cast(_random(rng, 1, *shape), dtype) for shape in ((2, 4), (3, 4), (3, 4)))
    mask = np.array([[[False, False, False], [True, True, False]]])
    output, weights = scaled_dot_product_attention(q, k, v, mask=ops.convert_to_tensor(mask))
    assert keras.backend.standardize_dtype(output.dtype) == dtype
    assert keras.backend.standardize_dtype(weights.dtype) == "float32"
    weights = ops.convert_to_numpy(weights)
    assert np.all(np.isfinite(ops.convert_to_numpy(output).astype("float32")))
    assert np.all(np.isfinite(weights))
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    assert weights[0, 1, 2] == 0.0


@pytest.mark.parametrize(
    "num_heads, key_dim, value_dim, output_dim",
    [(1, 8, None, None), (4, 2, None, None), (2, 3, 5, 7)],
)
def test_multi_head_attention_matches_numpy_reference(num_heads, key_dim, value_dim, output_dim):
    """MultiHead(Q,K,V) = Concat(head_1..head_h)W^O, rebuilt from the layer's own kernels,
    for self- and cross-attention, d_v ≠ d_k and an explicit output size."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(3)
    query, value = _random(rng, 2, 4, 8), _random(rng, 2, 6, 8)
    mask = rng.random((2, 4, 6)) > 0.3
    mask[..., 0] = True
    layer = MultiHeadAttention(
        num_heads=num_heads, key_dim=key_dim, value_dim=value_dim, output_dim=output_dim
    )
    output, weights = layer(
        query, value, attention_mask=ops.convert_to_tensor(mask), return_attention_scores=True
    )
    expected_output, expected_weights = _np_multi_head(layer, query, value, mask)
    assert output.shape == (2, 4, output_dim or 8)
    assert weights.shape == (2, num_heads, 4, 6)
    np.testing.assert_allclose(ops.convert_to_numpy(weights), expected_weights, atol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(output), expected_output, atol=1e-4)

    self_output = layer(query)
    expected_self_output, _ = _np_multi_head(layer, query, query)
    np.testing.assert_allclose(ops.convert_to_numpy(self_output), expected_self_output, atol=1e-4)


@pytest.mark.parametrize("num_heads, key_dim, value_dim", [(1, 8, None), (2, 3, 5)])
def test_fused_attention_matches_numpy_reference(num_heads, key_dim, value_dim):
    """`fused` (keras.ops.dot_product_attention) computes the paper's MultiHead: cross-attention
    under a padding-and-pattern mask, self-attention, and causal self-attention on top of a
    key mask, as the decoder calls it."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(4)
    query, value = _random(rng, 2, 4, 8), _random(rng, 2, 6, 8)
    mask = rng.random((2, 4, 6)) > 0.3
    mask[..., 0] = True
    layer = MultiHeadAttention(num_heads=num_heads, key_dim=key_dim, value_dim=value_dim,
                               fused=True)
    output = layer(query, value, attention_mask=ops.convert_to_tensor(mask))
    np.testing.assert_allclose(ops.convert_to_numpy(output),
                               _np_multi_head(layer, query, value, mask)[0], atol=1e-4)
    np.testing.assert_allclose(ops.convert_to_numpy(layer(query)),
                               _np_multi_head(layer, query, query)[0], atol=1e-4)
    key_mask = np.array([[True] * 4, [True, True, True, False]])[:, None, :]
    causal = np.logical_and(key_mask, np.tril(np.ones((4, 4), bool)))
    causal_output = layer(query, attention_mask=ops.convert_to_tensor(key_mask),
                          use_causal_mask=True)
    np.testing.assert_allclose(ops.convert_to_numpy(causal_output),
                               _np_multi_head(layer, query, query, causal)[0], atol=1e-4)


def test_multi_head_attention_has_no_biases_and_paper_shapes():
    """Projections are bias-free (as tensor2tensor): W^Q, W^K ∈ d×h·d_k, W^V ∈ d×h·d_v and
    W^O ∈ h·d_v×d."""
    layer = MultiHeadAttention(num_heads=2, key_dim=3, value_dim=5)
    layer(np.zeros((1, 4, 8), "float32"))
    shapes = sorted(tuple(w.shape) for w in layer.trainable_weights)
    assert shapes == sorted([(8, 6), (8, 6), (8, 10), (10, 8)])
    assert layer.compute_output_shape((1, 4, 8)) == (1, 4, 8)


def test_padded_keys_get_zero_weight_and_padding_amount_does_not_matter():
    """With the source padding mask, padded keys get zero weight in every head, and the output at
    every query is the same whether the keys carry 1 or 4 extra padding positions."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(4)
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    ids = np.array([[3, 5, 7, 0], [2, 0, 0, 0]])
    longer_ids = np.pad(ids, ((0, 0), (0, 3)))
    query = _random(rng, 2, 3, 8)
    memory = _random(rng, 2, 4, 8)
    longer_memory = np.concatenate([memory, _random(rng, 2, 3, 8)], axis=1)

    output, weights = layer(
        query, memory, attention_mask=padding_mask(ids), return_attention_scores=True
    )
    longer_output, longer_weights = layer(
        query, longer_memory, attention_mask=padding_mask(longer_ids), return_attention_scores=True
    )
    weights, longer_weights = ops.convert_to_numpy(weights), ops.convert_to_numpy(longer_weights)
    for example, example_ids in enumerate(longer_ids):
        assert np.all(longer_weights[example][..., example_ids == 0] == 0.0)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(longer_weights[..., :4], weights, atol=1e-6)
    np.testing.assert_allclose(
        ops.convert_to_numpy(longer_output), ops.convert_to_numpy(output), atol=1e-5
    )


def test_causal_mask_is_lower_triangular():
    """Position i may attend to positions j <= i only."""
    np.testing.assert_array_equal(
        ops.convert_to_numpy(causal_mask(5)), np.tril(np.ones((5, 5), dtype=bool))
    )


def test_padding_mask_marks_non_pad_keys():
    """[batch, length] ids -> [batch, 1, length], True at every non-zero id."""
    ids = np.array([[4, 0, 9, 0], [1, 2, 3, 4]])
    mask = ops.convert_to_numpy(padding_mask(ids))
    assert mask.shape == (2, 1, 4)
    np.testing.assert_array_equal(mask[:, 0], ids != 0)


def test_attention_dropout_only_in_training():
    """Attention-weight dropout changes outputs in training and is the identity at inference."""
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(5).standard_normal((2, 6, 8)).astype("float32")
    layer = MultiHeadAttention(num_heads=2, key_dim=4, dropout=0.5)
    inference = ops.convert_to_numpy(layer(x, training=False))
    np.testing.assert_allclose(inference, _np_multi_head(layer, x, x)[0], atol=1e-4)
    assert not np.allclose(ops.convert_to_numpy(layer(x, training=True)), inference)


def test_importing_the_layers_leaves_the_warnings_filters_unchanged():
    """A library must not change how the importing program's warnings are shown (Keras and
    its dependencies add filters of their own, so they are imported first)."""
    code = (
        "import warnings\n"
        "import keras\n"
        "before = list(warnings.filters)\n"
        "import t2t_repro.layers\n"
        "assert warnings.filters == before, [f for f in warnings.filters if f not in before]\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_attention_over_a_single_key_does_not_warn():
    """One key (a one-token source, the first decoding step) is legitimate, not a mistake."""
    x = keras.random.normal((1, 3, 8))
    key = keras.random.normal((1, 1, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        output, weights = scaled_dot_product_attention(x, key, key)
    np.testing.assert_allclose(ops.convert_to_numpy(weights), 1.0)
