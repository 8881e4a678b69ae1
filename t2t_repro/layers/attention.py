"""Scaled dot-product attention and multi-head attention (paper §3.2)."""

import math
import warnings

import keras
from keras import ops

from t2t_repro.layers.dense_layout import dense, laid_out_kernels
from t2t_repro.layers.head_transpose import swap_heads_axis
from t2t_repro.layers.masks import band_mask, causal_mask, within_window

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


def restricted_attention(query, key, value, window, causal=False, key_mask=None, dropout=None,
                         training=None):
    """Restricted self-attention (paper Table 1, row 4) at O(n·window) cost instead of O(n²).

    Position i attends to positions j with |i - j| < `window` (and j <= i with `causal`), as
    `scaled_dot_product_attention` under `band_mask` would, without computing the n × n
    square: positions are cut into blocks of `window`, and a block's queries attend to the
    keys of their own block and the one before it (and after it, unless `causal`), the only
    keys within reach.

    Args:
        query, key, value: [batch, heads, n, d_k], [batch, heads, n, d_k], [batch, heads, n,
            d_v] (self-attention: one length).
        window: the window, >= 1.
        causal: attend to earlier positions only (a decoder's self-attention).
        key_mask: optional boolean [batch, n]; False keys (padding) get zero weight.
        dropout, training: as in `scaled_dot_product_attention`.

    Returns:
        output [batch, heads, n, d_v]. A query whose window holds only padding (a padding
        position far from any token) gets an average of its window's values, where the full
        square would average all values; such rows are padding and ignored downstream.
    """
    batch, heads, length = ops.shape(query)[0], ops.shape(query)[1], ops.shape(query)[2]
    blocks = (length + window - 1) // window
    padded_length = blocks * window

    def in_blocks(x):  # [batch, h, n, d] -> [batch, h, blocks, window, d], zero-padded
        x = ops.pad(x, ((0, 0), (0, 0), (0, padded_length - length), (0, 0)))
        return ops.reshape(x, (batch, ops.shape(x)[1], blocks, window, ops.shape(x)[-1]))

    def with_neighbours(x):  # [..., blocks, window, d] -> [..., blocks, 2 or 3 windows, d]
        no_block = ((0, 0), (0, 0), (1, 0), (0, 0), (0, 0))
        parts = [ops.pad(x, no_block)[:, :, :-1], x]
        if not causal:
            parts.append(ops.pad(x, no_block[:2] + ((0, 1),) + no_block[3:])[:, :, 1:])
        return ops.concatenate(parts, axis=3)

    # Keys past the end, and blocks before the first and after the last, are zero-padded.
    real = ops.ones((batch, length), "int32") if key_mask is None else ops.cast(key_mask, "int32")
    real = with_neighbours(in_blocks(ops.reshape(real, (batch, 1, length, 1))))[..., 0] > 0
    span = 2 * window if causal else 3 * window
    # Query q of a block and key k of its span are (q + window - k) positions apart.
    distance = ops.expand_dims(ops.arange(window), 1) + window - ops.expand_dims(
        ops.arange(span), 0)
    mask = ops.logical_and(within_window(distance, window, causal), ops.expand_dims(real, 3))
    output, _ = scaled_dot_product_attention(
        in_blocks(query), with_neighbours(in_blocks(key)), with_neighbours(in_blocks(value)),
        mask=mask, dropout=dropout, training=training,
    )
    output = ops.reshape(output, (batch, heads, padded_length, ops.shape(value)[-1]))
    return output[:, :, :length]


@keras.saving.register_keras_serializable(package="t2t_repro")
class MultiHeadAttention(keras.layers.Layer):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O,
    with head_i = Attention(QW_i^Q, KW_i^K, VW_i^V).

    Projections carry no bias, as in tensor2tensor, unless `use_bias` (Marian's have them).

    Args:
        num_heads: h.
        key_dim: d_k, the size of each head's queries and keys.
        value_dim: d_v, the size of each head's values; defaults to `key_dim`.
        output_dim: size of the output; defaults to the query's last dimension.
        dropout: dropout rate on the attention weights (0 in the paper).
        window: restricted self-attention (paper Table 1): when > 0, a query attends only to
            keys fewer than `window` positions away, computed block by block at O(window·n)
            cost (`restricted_attention`); 0 (the paper's model) attends to every key. For
            self-attention only: `call`'s `attention_mask` must then be a key mask [batch, 1,
            length] such as `padding_mask`, and causality is `use_causal_mask`.
        use_bias: a bias on each of the four projections (Marian's attention has them).
        fused: where nothing needs the weights (no `return_attention_scores`, no `window`,
            no weight dropout in training) and d_v = d_k (as JAX's kernel requires), `call`
            attends through `keras.ops.dot_product_attention`, which never materialises
            them: cuDNN's flash attention on NVIDIA GPUs under JAX in 16 bits, a plain XLA
            or TensorFlow kernel elsewhere. The same function as the explicit path;
            incremental decoding (`attend_to_projected`) stays explicit.

    Example:
    >>> attention = MultiHeadAttention(num_heads=8, key_dim=64)
    >>> x = keras.random.normal((2, 10, 512))
    >>> attention(x, x).shape
    (2, 10, 512)

    Reference: Vaswani et al., "Attention Is All You Need", 2017, §3.2.2.
    """

    def __init__(self, num_heads, key_dim, value_dim=None, output_dim=None, dropout=0.0, window=0,
                 use_bias=False, fused=False, **kwargs):
        super().__init__(**kwargs)
        if window < 0:
            raise ValueError(f"window must be >= 0 (0: attend to every key), got {window}.")
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim or key_dim
        self.output_dim = output_dim
        self.dropout = dropout
        self.window = window
        self.use_bias = use_bias
        self.fused = fused
        self.query_dense = keras.layers.Dense(num_heads * key_dim, use_bias=use_bias, name="query",
                                              dtype=self.dtype_policy)
        self.key_dense = keras.layers.Dense(num_heads * key_dim, use_bias=use_bias, name="key",
                                            dtype=self.dtype_policy)
        self.value_dense = keras.layers.Dense(
            num_heads * self.value_dim, use_bias=use_bias, name="value", dtype=self.dtype_policy
        )
        self.output_dense = None
        self.weights_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def build(self, query_shape, value_shape=None):
        value_shape = value_shape or query_shape
        self.query_dense.build(query_shape)
        self.key_dense.build(value_shape)
        self.value_dense.build(value_shape)
        output_dim = self.output_dim or query_shape[-1]
        self.output_dense = keras.layers.Dense(output_dim, use_bias=self.use_bias, name="output",
                                               dtype=self.dtype_policy)
        self.output_dense.build((*query_shape[:-1], self.num_heads * self.value_dim))

    def _split_heads(self, x, depth):
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        return swap_heads_axis(ops.reshape(x, (batch, length, self.num_heads, depth)))

    def _merge_heads(self, x):
        x = swap_heads_axis(x)
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        return ops.reshape(x, (batch, length, self.num_heads * self.value_dim))

    def call(
        self, query, value=None, attention_mask=None, training=None, return_attention_scores=False,
        use_causal_mask=False,
    ):
        """Attends from `query` [batch, q_len, d] to `value` [batch, k_len, d] (default: query).

        `attention_mask` is boolean, broadcastable to [batch, q_len, k_len]; True entries may
        be attended to. `use_causal_mask` also masks keys after each query (self-attention).
        With `return_attention_scores`, also returns the weights [batch, heads, q_len, k_len]
        (with a `window` these come from the whole square under `band_mask`: same outputs,
        O(n²) cost).
        """
        value = query if value is None else value
        if (self.fused and not self.window and self.value_dim == self.key_dim
                and not return_attention_scores and not (self.dropout and training)):
            return self._attend_fused(query, value, attention_mask, use_causal_mask)
        key, value = self.project_key_value(value)
        if self.window and not return_attention_scores:
            return self._attend_within_window(query, key, value, attention_mask,
                                              use_causal_mask, training)
        length = ops.shape(query)[1]
        if self.window:
            structure = band_mask(length, self.window, use_causal_mask)
        else:
            structure = causal_mask(length) if use_causal_mask else None
        if structure is not None:
            attention_mask = structure if attention_mask is None else ops.logical_and(
                attention_mask, structure)
        return self.attend_to_projected(
            query, key, value, attention_mask, training, return_attention_scores
        )

    def _attend_fused(self, query, value, attention_mask, causal):
        """`call` through `keras.ops.dot_product_attention`, heads in its [batch, length,
        heads, depth] layout. The mask is broadcast to [batch, 1, q_len, k_len]: cuDNN takes
        it as a bias of the full square, and only at even lengths; at others (or lengths
        unknown when traced) Keras is not asked for it, since it would try, fail and log a
        traceback per layer before falling back."""
        batch, q_length, k_length = ops.shape(query)[0], ops.shape(query)[1], ops.shape(value)[1]
        even = all(isinstance(n, int) and n % 2 == 0 for n in (query.shape[1], value.shape[1]))

        def heads(x, length, depth):
            return ops.reshape(x, (batch, length, self.num_heads, depth))

        mask = None
        if attention_mask is not None:
            mask = ops.broadcast_to(ops.expand_dims(attention_mask, axis=-3),
                                    (batch, 1, q_length, k_length))
        context = ops.dot_product_attention(
            heads(self.query_dense(query), q_length, self.key_dim),
            heads(self.key_dense(value), k_length, self.key_dim),
            heads(self.value_dense(value), k_length, self.value_dim),
            mask=mask, is_causal=causal, flash_attention=None if even else False,
        )
        return self.output_dense(
            ops.reshape(context, (batch, q_length, self.num_heads * self.value_dim)))

    def _attend_within_window(self, query, key, value, attention_mask, causal, training):
        if attention_mask is not None and (len(attention_mask.shape) != 3
                                           or attention_mask.shape[1] != 1):
            raise ValueError(
                f"With window={self.window}, attention_mask must be a key mask [batch, 1, "
                f"length] (e.g. padding_mask), got shape {tuple(attention_mask.shape)}: the "
                f"window and use_causal_mask give the rest of the pattern.")
        q = self._split_heads(self.query_dense(query), self.key_dim)
        context = restricted_attention(
            q, key, value, self.window, causal,
            key_mask=None if attention_mask is None else attention_mask[:, 0],
            dropout=self.weights_dropout, training=training,
        )
        return self.output_dense(self._merge_heads(context))

    def project_key_value(self, value, kernels=None):
        """Per-head keys [batch, heads, k_len, d_k] and values [batch, heads, k_len, d_v].

        Split out of `call` so a decoder can project the encoder output once per sentence,
        and write one new position at a time into a self-attention cache. `kernels`:
        `laid_out_kernels()`'s, for a decoding step.
        """
        kernels = kernels or {}
        return (
            self._split_heads(dense(self.key_dense, value, kernels.get("key")), self.key_dim),
            self._split_heads(dense(self.value_dense, value, kernels.get("value")),
                              self.value_dim),
        )

    def attend_to_projected(
        self, query, key, value, attention_mask=None, training=None, return_attention_scores=False,
        kernels=None,
    ):
        """`call` with keys and values already projected by `project_key_value`."""
        kernels = kernels or {}
        q = self._split_heads(dense(self.query_dense, query, kernels.get("query")), self.key_dim)
        mask = None if attention_mask is None else ops.expand_dims(attention_mask, axis=-3)
        context, weights = scaled_dot_product_attention(
            q, key, value, mask=mask, dropout=self.weights_dropout, training=training
        )
        output = dense(self.output_dense, self._merge_heads(context), kernels.get("output"))
        return (output, weights) if return_attention_scores else output

    def laid_out_kernels(self, names=("query", "key", "value", "output")):
        """The named projections' kernels laid out for a decoding loop (`dense_layout`)."""
        return laid_out_kernels({name: getattr(self, f"{name}_dense") for name in names})

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
            window=self.window,
            use_bias=self.use_bias,
            fused=self.fused,
        )
        return config
