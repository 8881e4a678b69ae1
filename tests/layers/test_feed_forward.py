"""Position-wise feed-forward network FFN(x) = max(0, xW1 + b1)W2 + b2 (paper §3.3)."""

import keras
import numpy as np
import pytest
from keras import ops

from t2t_repro.layers import PositionwiseFeedForward


def _randomise_biases(layer, rng):
    """Biases start at zero; give them values so the test also checks that they are added."""
    for dense in (layer.inner_dense, layer.output_dense):
        dense.bias.assign(rng.standard_normal(tuple(dense.bias.shape)).astype("float32"))


@pytest.mark.parametrize("output_dim", [None, 5])
def test_feed_forward_matches_paper_formula(output_dim):
    """Output equals max(0, xW1 + b1)W2 + b2 computed with NumPy from the layer's weights."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 8)).astype("float32")
    layer = PositionwiseFeedForward(intermediate_dim=12, output_dim=output_dim)
    layer.build(x.shape)
    _randomise_biases(layer, rng)
    w1, b1 = (ops.convert_to_numpy(v) for v in (layer.inner_dense.kernel, layer.inner_dense.bias))
    w2, b2 = (ops.convert_to_numpy(v) for v in (layer.output_dense.kernel, layer.output_dense.bias))
    expected = np.maximum(0.0, x @ w1 + b1) @ w2 + b2
    output = ops.convert_to_numpy(layer(x))
    assert output.shape == (2, 4, output_dim or 8)
    assert layer.compute_output_shape(x.shape) == (2, 4, output_dim or 8)
    np.testing.assert_allclose(output, expected, atol=1e-5)


def test_feed_forward_acts_on_each_position_alone():
    """Position-wise: changing one position's input leaves every other position's output
    unchanged."""
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(1).standard_normal((1, 5, 8)).astype("float32")
    layer = PositionwiseFeedForward(intermediate_dim=12)
    before = ops.convert_to_numpy(layer(x))
    x_changed = x.copy()
    x_changed[0, 2] += 1.0
    after = ops.convert_to_numpy(layer(x_changed))
    np.testing.assert_allclose(
        np.delete(after, 2, axis=1), np.delete(before, 2, axis=1), atol=1e-6
    )
    assert not np.allclose(after[0, 2], before[0, 2])


def test_feed_forward_weight_count():
    """d·d_ff + d_ff (W1, b1) plus d_ff·d + d (W2, b2)."""
    layer = PositionwiseFeedForward(intermediate_dim=2048)
    layer.build((None, None, 512))
    assert layer.count_params() == 512 * 2048 + 2048 + 2048 * 512 + 512


def test_relu_dropout_only_in_training():
    """Dropout on the ReLU activations is active in training only."""
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(2).standard_normal((2, 4, 8)).astype("float32")
    layer = PositionwiseFeedForward(intermediate_dim=32, dropout=0.5)
    inference = ops.convert_to_numpy(layer(x, training=False))
    np.testing.assert_array_equal(inference, ops.convert_to_numpy(layer(x)))
    assert not np.allclose(ops.convert_to_numpy(layer(x, training=True)), inference)
