"""Encoder and decoder layers (paper §3.1), post-norm as published or pre-norm as an option."""

import keras
from keras import ops

from t2t_repro.layers.attention import MultiHeadAttention
from t2t_repro.layers.cache_reads import keys_values_to_read, mask_to_read, own_slot_mask
from t2t_repro.layers.cache_writes import write_position
from t2t_repro.layers.feed_forward import PositionwiseFeedForward


class _ResidualSublayers(keras.layers.Layer):
    """What the encoder and decoder layers share: sublayer wiring, dropout and normalisation.

    Post-norm (the paper): LayerNorm(x + Dropout(Sublayer(x))).
    Pre-norm (`normalize_first=True`): x + Dropout(Sublayer(LayerNorm(x))).
    """

    def __init__(
        self,
        hidden_size,
        num_heads,
        intermediate_dim,
        key_dim=None,
        value_dim=None,
        dropout=0.1,
        attention_dropout=0.0,
        relu_dropout=0.0,
        normalize_first=False,
        layer_norm_epsilon=1e-6,
        self_attention_window=0,
        ffn_activation="relu",
        attention_bias=False,
        fused_attention=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.key_dim = key_dim or hidden_size // num_heads
        self.value_dim = value_dim or self.key_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.relu_dropout = relu_dropout
        self.normalize_first = normalize_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.self_attention_window = self_attention_window
        self.ffn_activation = ffn_activation
        self.attention_bias = attention_bias
        self.fused_attention = fused_attention
        self.residual_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    def _attention(self, name, window=0):
        return MultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=self.key_dim,
            value_dim=self.value_dim,
            dropout=self.attention_dropout,
            window=window,
            use_bias=self.attention_bias,
            fused=self.fused_attention,
            name=name,
            dtype=self.dtype_policy,
        )

    def _feed_forward(self):
        return PositionwiseFeedForward(
            self.intermediate_dim, dropout=self.relu_dropout, activation=self.ffn_activation,
            name="feed_forward", dtype=self.dtype_policy,
        )

    def _norm(self, name):
        return keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon, name=name,
                                                dtype=self.dtype_policy)

    def _residual(self, x, sublayer, norm, training):
        """Wraps `sublayer` (a function of one tensor) in residual dropout and LayerNorm."""
        if self.normalize_first:
            return x + self.residual_dropout(sublayer(norm(x)), training=training)
        return norm(x + self.residual_dropout(sublayer(x), training=training))

    @staticmethod
    def _attend(attention, scores, name, return_scores, *args, **kwargs):
        """Calls `attention`; with `return_scores`, also stores its weights in scores[name]
        (asked for only then: a restricted self-attention computes the square for them)."""
        if not return_scores:
            return attention(*args, **kwargs)
        output, scores[name] = attention(*args, return_attention_scores=True, **kwargs)
        return output

    def _feed_forward_block(self, x, training, kernels=None):
        return self._residual(
            x, lambda h: self.feed_forward(h, training=training, kernels=kernels),
            self.feed_forward_norm, training
        )

    def compute_output_shape(self, x_shape, *other_shapes):
        return x_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            hidden_size=self.hidden_size,
            num_heads=self.num_heads,
            intermediate_dim=self.intermediate_dim,
            key_dim=self.key_dim,
            value_dim=self.value_dim,
            dropout=self.dropout,
            attention_dropout=self.attention_dropout,
            relu_dropout=self.relu_dropout,
            normalize_first=self.normalize_first,
            layer_norm_epsilon=self.layer_norm_epsilon,
            self_attention_window=self.self_attention_window,
            ffn_activation=self.ffn_activation,
            attention_bias=self.attention_bias,
            fused_attention=self.fused_attention,
        )
        return config


@keras.saving.register_keras_serializable(package="t2t_repro")
class TransformerEncoderLayer(_ResidualSublayers):
    """Self-attention then a position-wise FFN, each in a residual block.

    Args:
        hidden_size: d_model.
        num_heads: h.
        intermediate_dim: d_ff.
        key_dim: d_k per head (default d_model / h). value_dim: d_v per head (default d_k).
        dropout: residual dropout P_drop, on each sublayer's output.
        attention_dropout: dropout on attention weights. relu_dropout: dropout inside the FFN.
        normalize_first: pre-norm instead of the paper's post-norm.
        layer_norm_epsilon: LayerNorm's epsilon.
        self_attention_window: restricted self-attention (paper Table 1): each position
            attends only to positions fewer than this many away (0, the paper's model: all).
        ffn_activation: the FFN's inner activation (`feed_forward.FFN_ACTIVATIONS`; the
            paper's "relu"). attention_bias: biases on the attention projections.
        fused_attention: attention through `keras.ops.dot_product_attention` where nothing
            needs its weights (`MultiHeadAttention`'s `fused`).

    Example:
    >>> layer = TransformerEncoderLayer(hidden_size=64, num_heads=4, intermediate_dim=128)
    >>> layer(keras.random.normal((2, 7, 64))).shape
    (2, 7, 64)

    Reference: Vaswani et al., "Attention Is All You Need", 2017, §3.1.
    """

    def __init__(self, hidden_size, num_heads, intermediate_dim, **kwargs):
        super().__init__(hidden_size, num_heads, intermediate_dim, **kwargs)
        self.self_attention = self._attention("self_attention", self.self_attention_window)
        self.self_attention_norm = self._norm("self_attention_norm")
        self.feed_forward = self._feed_forward()
        self.feed_forward_norm = self._norm("feed_forward_norm")

    def build(self, x_shape):
        self.self_attention.build(x_shape)
        self.self_attention_norm.build(x_shape)
        self.feed_forward.build(x_shape)
        self.feed_forward_norm.build(x_shape)

    def call(self, x, attention_mask=None, training=None, return_attention_scores=False):
        """x: [batch, length, d]; attention_mask: boolean, broadcastable to [batch, length,
        length] (the source padding mask)."""
        scores = {}

        def attend(h):
            return self._attend(self.self_attention, scores, "self", return_attention_scores, h,
                                attention_mask=attention_mask, training=training)

        x = self._residual(x, attend, self.self_attention_norm, training)
        x = self._feed_forward_block(x, training)
        return (x, scores["self"]) if return_attention_scores else x


@keras.saving.register_keras_serializable(package="t2t_repro")
class TransformerDecoderLayer(_ResidualSublayers):
    """Masked self-attention, encoder-decoder attention, then a position-wise FFN.

    Takes the same arguments as `TransformerEncoderLayer`. Self-attention is causal: position
    i attends to positions <= i (and with `self_attention_window` = r, > i - r).

    Example:
    >>> layer = TransformerDecoderLayer(hidden_size=64, num_heads=4, intermediate_dim=128)
    >>> x, memory = keras.random.normal((2, 5, 64)), keras.random.normal((2, 7, 64))
    >>> layer(x, memory).shape
    (2, 5, 64)

    Reference: Vaswani et al., "Attention Is All You Need", 2017, §3.1.
    """

    def __init__(self, hidden_size, num_heads, intermediate_dim, **kwargs):
        super().__init__(hidden_size, num_heads, intermediate_dim, **kwargs)
        self.self_attention = self._attention("self_attention", self.self_attention_window)
        self.self_attention_norm = self._norm("self_attention_norm")
        self.cross_attention = self._attention("cross_attention")
        self.cross_attention_norm = self._norm("cross_attention_norm")
        self.feed_forward = self._feed_forward()
        self.feed_forward_norm = self._norm("feed_forward_norm")

    def build(self, x_shape, memory_shape=None):
        memory_shape = memory_shape or x_shape
        self.self_attention.build(x_shape)
        self.self_attention_norm.build(x_shape)
        self.cross_attention.build(x_shape, memory_shape)
        self.cross_attention_norm.build(x_shape)
        self.feed_forward.build(x_shape)
        self.feed_forward_norm.build(x_shape)

    def call(
        self,
        x,
        memory,
        self_attention_mask=None,
        memory_mask=None,
        training=None,
        return_attention_scores=False,
    ):
        """x: [batch, t, d]; memory: encoder output [batch, s, d].

        self_attention_mask: boolean, broadcastable to [batch, t, t], on top of the causal
            mask the layer applies itself; with `self_attention_window` a key mask [batch, 1,
            t] only.
        memory_mask: boolean, broadcastable to [batch, t, s] (the source padding mask).
        With `return_attention_scores`, also returns {"self": ..., "cross": ...} weights.
        """
        scores = {}

        def self_attend(h):
            return self._attend(self.self_attention, scores, "self", return_attention_scores, h,
                                attention_mask=self_attention_mask, training=training,
                                use_causal_mask=True)

        def cross_attend(h):
            return self._attend(self.cross_attention, scores, "cross", return_attention_scores,
                                h, memory, attention_mask=memory_mask, training=training)

        x = self._residual(x, self_attend, self.self_attention_norm, training)
        x = self._residual(x, cross_attend, self.cross_attention_norm, training)
        x = self._feed_forward_block(x, training)
        return (x, scores) if return_attention_scores else x

    def decode_step(self, x, position, self_cache, memory_key_value, memory_mask=None,
                    self_attention_mask=None, kernels=None):
        """One decoding position (inference) for every hypothesis of every sentence: `call`
        at `position` for x [batch, beam, d], the beam hypotheses of each sentence side by side.

        Self-attention attends to `self_cache` ((keys, values), each [batch, heads, beam,
        max_length, d_k or d_v], preallocated), the keys and values of earlier positions in
        `beam` slots per sentence. This position's keys and values are written in place, each
        hypothesis's into its own slot, so a step costs one position, not the whole prefix.
        When beam search reorders hypotheses the cache is not copied: `self_attention_mask`
        (boolean [batch, beam, beam·n], `cache_reads.mask_to_read`'s, made once a step for
        every layer) says which slot holds each earlier position of each hypothesis; None means
        each hypothesis's own slot (nothing was reordered). In a plain TensorFlow graph only
        the n positions written so far are read (`layers.cache_reads`); elsewhere n is
        max_length. The cache is a ring (`cached_positions`): position p goes to index
        p % max_length, so a restricted self-attention of window r needs a cache of only r
        positions. `memory_key_value` is
        `cross_attention.project_key_value(memory)` [batch, heads, source, d], computed once
        per sentence and shared by its hypotheses. `kernels`: `laid_out_kernels()`'s, made
        once for all the steps of a batch.

        Returns (output [batch, beam, d], the updated cache).
        """
        kernels = kernels or {}
        keys, values = self_cache
        if self_attention_mask is None:
            self_attention_mask = mask_to_read(
                own_slot_mask(ops.shape(keys)[2], ops.shape(keys)[3], position), position)

        def self_attend(h):
            nonlocal keys, values
            key, value = self.self_attention.project_key_value(h, kernels.get("self_attention"))
            index = position % ops.shape(keys)[3]
            keys = write_position(keys, index, key)
            values = write_position(values, index, value)
            return self.self_attention.attend_to_projected(
                h, *keys_values_to_read(keys, values, position), self_attention_mask,
                kernels=kernels.get("self_attention"),
            )

        def cross_attend(h):
            return self.cross_attention.attend_to_projected(
                h, *memory_key_value, attention_mask=memory_mask,
                kernels=kernels.get("cross_attention"),
            )

        x = self._residual(x, self_attend, self.self_attention_norm, training=False)
        x = self._residual(x, cross_attend, self.cross_attention_norm, training=False)
        x = self._feed_forward_block(x, training=False, kernels=kernels.get("feed_forward"))
        return x, (keys, values)

    def laid_out_kernels(self):
        """The kernels `decode_step` multiplies by, laid out for a decoding loop
        (`layers.dense_layout`): the cross-attention's keys and values are projected once per
        sentence, so only its query and output projections."""
        return {"self_attention": self.self_attention.laid_out_kernels(),
                "cross_attention": self.cross_attention.laid_out_kernels(("query", "output")),
                "feed_forward": self.feed_forward.laid_out_kernels()}

