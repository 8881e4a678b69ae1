"""The shared token embedding: lookup scaled by √d_model and the tied pre-softmax projection."""

import math

import keras
import numpy as np
from keras import ops

from t2t_repro.layers import SharedEmbedding


def test_embedding_is_matrix_row_times_sqrt_d_model():
    """embed(id) = E[id] · √d_model (paper §3.4), checked against a NumPy lookup."""
    keras.utils.set_random_seed(0)
    layer = SharedEmbedding(vocab_size=11, hidden_size=16)
    ids = np.array([[5, 7, 0], [10, 1, 1]])
    hidden = ops.convert_to_numpy(layer(ids))
    matrix = ops.convert_to_numpy(layer.embeddings)
    np.testing.assert_allclose(hidden, matrix[ids] * math.sqrt(16), rtol=1e-6)


def test_logits_use_the_transposed_embedding_matrix():
    """logits(h) = h Eᵀ: the same matrix is the pre-softmax projection."""
    keras.utils.set_random_seed(0)
    layer = SharedEmbedding(vocab_size=11, hidden_size=16)
    layer.build()
    hidden = np.random.default_rng(0).standard_normal((2, 3, 16)).astype("float32")
    logits = ops.convert_to_numpy(layer.logits(hidden))
    assert logits.shape == (2, 3, 11)
    np.testing.assert_allclose(logits, hidden @ ops.convert_to_numpy(layer.embeddings).T, atol=1e-5)


def test_one_variable_of_shape_vocab_by_hidden():
    """The layer owns exactly one weight, [vocab, hidden], used for embedding and logits."""
    layer = SharedEmbedding(vocab_size=11, hidden_size=16)
    layer(np.array([[1, 2]]))
    assert [tuple(w.shape) for w in layer.weights] == [(11, 16)]
    assert layer.compute_output_shape((2, 5)) == (2, 5, 16)


def test_scaled_embeddings_have_unit_scale_at_initialisation():
    """Rows are drawn with std d^-0.5, so after the √d scaling the embeddings are ~unit scale."""
    keras.utils.set_random_seed(0)
    layer = SharedEmbedding(vocab_size=2000, hidden_size=64)
    hidden = ops.convert_to_numpy(layer(np.arange(2000)[None, :]))
    assert abs(hidden.std() - 1.0) < 0.05
