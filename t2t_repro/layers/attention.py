"""Scaled dot-product attention and multi-head attention (paper §3.2)."""

import math
import warnings

import keras
from keras import ops

# Keras warns of a softmax over an axis of size 1. Attention over a single key is legitimate (the
# first decoding step, a one-token source); the warning would repeat on every such call.
_SINGLE_KEY_SOFTMAX_WARNING = "You are using a softmax over axis -1 of a tensor"


# Stands in for -inf before the softmax; finite so fully masked rows stay NaN-free.
_LARGE_NEGATIVE = -1e9


def scaled_dot_product_attention(query, key, value, mask=None, dropout=None, training=None):
    """softmax(QKᵀ/√d_k)V over the last two axes.

    Args:
        query: [..., q_length, d_k]. key: [..., k_length, d_k]. value: [..., k_length, d_v].
        mask: optional boolean, broadcastable to [..., q_length, k_length]; False entries are
            illegal connections and get zero weight.
        dropout: optional dropout layer applied to the attention weights.
        training: passed to `dropout`.

    Under a mixed dtype policy the two products run in the inputs' 16-bit dtype, but the mask
    and the softmax in float32: float16 cannot hold the mask's large negative, and weights
    rounded to 16 bits would sum to 1 only within about 2^-8. The weights returned are float32.

    Returns:
        (output [..., q_length, d_v], weights [..., q_length, k_length])
    """
    depth = ops.shape(query)[-1]
    # Scaled before the product (as tensor2tensor does) so that float16 logits overflow later.
    logits = ops.matmul(query / math.sqrt(depth), ops.swapaxes(key, -1, -2))
    logits = ops.cast(logits, "float32")
    if mask is not None:
        logits = ops.where(mask, logits, _LARGE_NEGATIVE)
    with warnings.catch_warnings():  # scoped: importing the library changes no global filter
        warnings.filterwarnings("ignore", message=_SINGLE_KEY_SOFTMAX_WARNING)
        weights = ops.softmax(logits, axis=-1)
    applied = weights if dropout is None else dropout(weights, training=training)
    return ops.matmul(ops.cast(applied, value.dtype), value), weights


@keras.saving.register_keras_serializable(package="t2t_repro")
class MultiHeadAttention(keras.layers.Layer):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O with head_i = Attention(QW_i^Q, KW_i^K, VW_i^V).

    Projections carry no bias, as in tensor2tensor.

    Args:
        num_heads: h.
        key_dim: d_k, the size of each head's queries and keys.
        value_dim: d_v, the size of each head's values; defaults to `key_dim`.
        output_dim: size of the output; defaults to the query's last dimension.
        dropout: dropout rate on the attention weights (0 in the paper).

    Example:
    >>> attention = MultiHeadAttention(num_heads=8, key_dim=64)
    >>> x = keras.random.normal((2, 10, 512))
    >>> attention(x, x).shape
    (2, 10, 512)

    Reference: Vaswani et al., "Attention Is All You Need", 2017, §3.2.2.
    """

    def __init__(self, num_heads, key_dim, value_dim=None, output_dim=None, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim or key_dim
        self.output_dim = output_dim
        self.dropout = dropout
        self.query_dense = keras.layers.Dense(num_heads * key_dim, use_bias=False, name="query",
                                              dtype=self.dtype_policy)
        self.key_dense = keras.layers.Dense(num_heads * key_dim, use_bias=False, name="key",
                                            dtype=self.dtype_policy)
        self.value_dense = keras.layers.Dense(
            num_heads * self.value_dim, use_bias=False, name="value", dtype=self.dtype_policy
        )
        self.output_dense = None
        self.weights_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def build(self, query_shape, value_shape=None):
        value_shape = value_shape or query_shape
        self.query_dense.build(query_shape)
        self.key_dense.build(value_shape)
        self.value_dense.build(value_shape)
        output_dim = self.output_dim or query_shape[-1]
        self.output_dense = keras.layers.Dense(output_dim, use_bias=False, name="output",
                                               dtype=self.dtype_policy)
        self.output_dense.build((*query_shape[:-1], self.num_heads * self.value_dim))

    def _split_heads(self, x, depth):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        x = ops.reshape(x, (batch, length, self.num_heads, depth))
        return ops.transpose(x, (0, 2, 1, 3))

    def _merge_heads(self, x):
        x = ops.transpose(x, (0, 2, 1, 3))
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        return ops.reshape(x, (batch, length, self.num_heads * self.value_dim))

    def call(
        self, query, value=None, attention_mask=None, training=None, return_attention_scores=False
    ):
        """Attends from `query` [batch, q_len, d] to `value` [batch, k_len, d] (default: query).

        `attention_mask` is boolean, broadcastable to [batch, q_len, k_len]; True entries may
        be attended to.
        With `return_attention_scores`, also returns the weights [batch, heads, q_len, k_len].
        """
        key, value = self.project_key_value(query if value is None else value)
        return self.attend_to_projected(
            query, key, value, attention_mask, training, return_attention_scores
        )

    def project_key_value(self, value):
        """Per-head keys [batch, heads, k_len, d_k] and values [batch, heads, k_len, d_v].

        Split out of `call` so a decoder can project the encoder output once per sentence,
        and write one new position at a time into a self-attention cache.
        """
        return (
            self._split_heads(self.key_dense(value), self.key_dim),
            self._split_heads(self.value_dense(value), self.value_dim),
        )

    def attend_to_projected(
        self, query, key, value, attention_mask=None, training=None, return_attention_scores=False
    ):
        """`call` with keys and values already projected by `project_key_value`."""
        q = self._split_heads(self.query_dense(query), self.key_dim)
        mask = None if attention_mask is None else ops.expand_dims(attention_mask, axis=-3)
        context, weights = scaled_dot_product_attention(
            q, key, value, mask=mask, dropout=self.weights_dropout, training=training
        )
        output = self.output_dense(self._merge_heads(context))
        return (output, weights) if return_attention_scores else output

    def compute_output_shape(self, query_shape, value_shape=None):
        return (*query_shape[:-1], self.output_dim or query_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            key_dim=self.key_dim,
            value_dim=self.value_dim,
            output_dim=self.output_dim,
            dropout=self.dropout,
        )
        return config
