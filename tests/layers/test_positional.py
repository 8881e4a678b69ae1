"""Sinusoidal position encoding (paper §3.5) and learned position embeddings (Table 3 row E)."""

import math

import numpy as np
import pytest
from keras import ops

from t2t_repro.layers import (
    LearnedPositionEmbedding,
    SinusoidalPositionEncoding,
    sinusoidal_position_encoding,
)

HIDDEN = 16


def _paper_pe(pos, channel, d):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d))."""
    two_i = channel - channel % 2
    angle = pos / 10000 ** (two_i / d)
    return math.sin(angle) if channel % 2 == 0 else math.cos(angle)


@pytest.mark.parametrize("pos", [0, 1, 7, 50])
@pytest.mark.parametrize("channel", [0, 1, 2, 3, 8, 9, HIDDEN - 2, HIDDEN - 1])
def test_sinusoidal_encoding_equals_paper_formula(pos, channel):
    """Each entry equals the paper's formula, evaluated with math.sin/math.cos; even channels
    are sines and odd channels cosines of the same frequency."""
    table = ops.convert_to_numpy(sinusoidal_position_encoding(64, HIDDEN))
    assert table.shape == (64, HIDDEN)
    assert table[pos, channel] == pytest.approx(_paper_pe(pos, channel, HIDDEN), abs=1e-5)


def test_sinusoidal_encoding_position_zero_is_sin0_cos0():
    """At pos 0 every sine is 0 and every cosine is 1."""
    row = ops.convert_to_numpy(sinusoidal_position_encoding(1, HIDDEN))[0]
    np.testing.assert_allclose(row[0::2], 0.0, atol=1e-7)
    np.testing.assert_allclose(row[1::2], 1.0, atol=1e-7)


@pytest.mark.parametrize("start_index", [0, 3, 45])
def test_sinusoidal_encoding_start_index_offsets_positions(start_index):
    """Row k of the encoding with `start_index` s is PE(s + k), for one-step-at-a-time decoding."""
    length = 5
    table = ops.convert_to_numpy(sinusoidal_position_encoding(length, HIDDEN, start_index))
    expected = np.array(
        [[_paper_pe(start_index + k, c, HIDDEN) for c in range(HIDDEN)] for k in range(length)]
    )
    np.testing.assert_allclose(table, expected, atol=1e-5)


def test_sinusoidal_layer_follows_input_shape_and_start_index():
    """The layer returns [length, d] for inputs [batch, length, d], offset by start_index."""
    inputs = np.zeros((3, 4, HIDDEN), "float32")
    layer = SinusoidalPositionEncoding()
    encoding = ops.convert_to_numpy(layer(inputs, start_index=7))
    expected = np.array([[_paper_pe(7 + k, c, HIDDEN) for c in range(HIDDEN)] for k in range(4)])
    assert encoding.shape == (4, HIDDEN)
    np.testing.assert_allclose(encoding, expected, atol=1e-5)
    assert layer.weights == []


def test_sinusoidal_encoding_rejects_odd_hidden_size():
    """Sines and cosines come in pairs, so an odd d_model is an error, not a silent truncation."""
    with pytest.raises(ValueError, match="even hidden_size"):
        sinusoidal_position_encoding(4, 7)


def test_learned_position_embedding_is_a_trainable_table():
    """The learned variant owns one trainable [max_length, d] table and returns its rows
    start_index .. start_index + length - 1."""
    layer = LearnedPositionEmbedding(max_length=10, hidden_size=HIDDEN)
    inputs = np.zeros((2, 4, HIDDEN), "float32")
    encoding = ops.convert_to_numpy(layer(inputs, start_index=3))
    assert len(layer.trainable_weights) == 1
    table = layer.trainable_weights[0]
    assert tuple(table.shape) == (10, HIDDEN)
    assert encoding.shape == (4, HIDDEN)
    np.testing.assert_array_equal(encoding, ops.convert_to_numpy(table)[3:7])
