"""The Transformer (paper §3) as a subclassed keras.Model built from HParams."""

import keras
from keras import ops

from t2t_repro import registry
from t2t_repro.errors import ConfigurationError, is_whole_number
from t2t_repro.hparams import (A_FRACTION, ADDED_MODEL_HPARAMS, HParams, HParamsError, at_least,
                               check_ranges, one_of)
from t2t_repro.layers import (
    LearnedPositionEmbedding,
    SharedEmbedding,
    SinusoidalPositionEncoding,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
    padding_mask,
    same_segment_mask,
)
from t2t_repro.layers.cache_reads import mask_to_read, slots_and_mask
from t2t_repro.layers.feed_forward import FFN_ACTIVATIONS
from t2t_repro.layers.positional import SINUSOID_LAYOUTS
from t2t_repro.layers.row_gathers import take_rows
from t2t_repro.utils.cpu import is_x86_without_avx512

POSITION_ENCODINGS = ("sinusoidal", "learned")
# Keras dtype policies the model trains under: each keeps its variables float32, so one
# checkpoint loads under all of them.
DTYPE_POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
# A decoding copy (`decoding_copy=True`, `decoding.precision`) may also hold its variables in
# bfloat16, so that its matmuls read half the bytes; it is never trained or saved.
DECODING_COPY_DTYPE_POLICIES = (*DTYPE_POLICIES, "bfloat16")
# The choices, sizes and rates a Transformer can be built with (`hparams.check_ranges`).
_MODEL_RANGES = {
    "position_encoding": one_of(POSITION_ENCODINGS), "dtype_policy": one_of(DTYPE_POLICIES),
    "ffn_activation": one_of(tuple(FFN_ACTIVATIONS)),
    "sinusoid_layout": one_of(SINUSOID_LAYOUTS),
    **dict.fromkeys(("hidden_size", "filter_size", "num_heads", "num_hidden_layers",
                     "max_length"), at_least(1)),
    **dict.fromkeys(("num_encoder_layers", "num_decoder_layers"),
                    at_least(0, " (0: num_hidden_layers)")),
    **dict.fromkeys(("attention_key_channels", "attention_value_channels"),
                    at_least(0, " (0: hidden_size)")),
    **dict.fromkeys(("layer_prepostprocess_dropout", "attention_dropout", "relu_dropout"),
                    A_FRACTION),
    "self_attention_window": at_least(0, " (0: full self-attention)"),
}


# Features of packed rows (tensor2tensor's names): several pairs end to end in one row, each
# numbered 1, 2, ... in its row (0: padding), positions restarting at 0 with each pair.
PACKING_FEATURES = ("inputs_segmentation", "inputs_position", "targets_segmentation",
                    "targets_position")


def shift_right(targets, targets_position=None):
    """Decoder inputs: the targets delayed by one position, starting with id 0, whose
    embedding row is trained like any other (tensor2tensor's `shift_right_3d` instead starts
    from an all-zero vector, and it zeroes the embedding of padding id 0); in packed rows
    (`targets_position` given) every pair starts with id 0."""
    shifted = ops.pad(targets, ((0, 0), (1, 0)))[:, :-1]
    if targets_position is None:
        return shifted
    return ops.where(ops.equal(targets_position, 0), ops.zeros_like(shifted), shifted)


def is_packed(features):
    return "inputs_segmentation" in features


_PACKED_NEEDS_FULL_ATTENTION = ("Packed rows need full self-attention: hparam packed=true does "
                                "not combine with self_attention_window > 0.")


def check_model_hparams(hparams):
    """HParamsError naming the first model hparam a Transformer cannot be built with: a
    choice it does not know, a size or rate out of its range, attention channels the heads
    cannot share equally (tensor2tensor requires the same), packed rows under windowed
    self-attention."""
    check_ranges(hparams, _MODEL_RANGES)
    if getattr(hparams, "packed", False) and hparams.self_attention_window:
        raise HParamsError(_PACKED_NEEDS_FULL_ATTENTION)
    for name in ("attention_key_channels", "attention_value_channels"):
        channels = getattr(hparams, name) or hparams.hidden_size
        if channels % hparams.num_heads:
            raise HParamsError(
                f"hparam num_heads={hparams.num_heads} does not divide the {channels} "
                f"{name.split('_')[1]} channels ({name} or hidden_size), which the heads "
                f"share equally; choose a num_heads that divides {channels}.")


def _check_dtype_policy(policy, decoding_copy):
    if policy.name not in (DECODING_COPY_DTYPE_POLICIES if decoding_copy else DTYPE_POLICIES):
        raise ValueError(
            f"Transformer supports the dtype policies {DTYPE_POLICIES}, got '{policy.name}'. "
            f"Variables must stay float32 so that one checkpoint loads under every policy: "
            f"for 16-bit matmuls use 'mixed_bfloat16' or 'mixed_float16'."
        )


def _position_layer(hparams, name, dtype):
    if hparams.position_encoding == "learned":
        return LearnedPositionEmbedding(hparams.max_length, hparams.hidden_size, name=name,
                                        dtype=dtype)
    return SinusoidalPositionEncoding(layout=hparams.sinusoid_layout, name=name, dtype=dtype)


def _call_layer(layer, attention_scores, *args, **kwargs):
    """Calls `layer`; when `attention_scores` is a dict, also stores its weights there."""
    if attention_scores is None:
        return layer(*args, **kwargs)
    output, attention_scores[layer.name] = layer(*args, return_attention_scores=True, **kwargs)
    return output


@registry.models.register("transformer")
@keras.saving.register_keras_serializable(package="t2t_repro")
class Transformer(keras.Model):
    """Encoder-decoder Transformer.

    Features are token ids with 0 as padding: `{"inputs": [batch, source_len], "targets":
    [batch, target_len]}`; `call` returns next-token logits [batch, target_len, vocab] for the
    targets shifted right (teacher forcing).

    Args:
        hparams: an `HParams` (or its dict of values) with the model's sizes and dropouts.
        input_vocab_size, target_vocab_size: the problem's vocabulary sizes. With
            `shared_source_target_embedding` (the paper's setting) they must be equal, and one
            matrix serves the source embedding, the target embedding and (with
            `shared_embedding_and_softmax_weights`) the pre-softmax projection.
        dtype: a Keras dtype policy, one of `DTYPE_POLICIES` (default: Keras's global policy),
            given to every sublayer. Under `mixed_bfloat16` or `mixed_float16` the matmuls run
            in 16 bits; the variables, the attention softmax, layer normalization and the
            returned logits stay float32. The caller picks it (`hparams.dtype_policy` to train,
            float32 to decode): the weights are float32 either way, so checkpoints interchange.
        decoding_copy: True for a copy made only to decode (`decoding.precision`), which may
            also take the `bfloat16` policy (variables in bfloat16 too).

    With learned positions (`position_encoding="learned"`, Table 3 row E) a sequence has at
    most `hparams.max_length` positions, the rows of the position table (`max_positions`):
    longer sources or decoder inputs are an error, and beam-search outputs are capped at
    `max_length` tokens (`TransformerBeamSearch.max_lengths` gives each sentence's cap).
    Sinusoidal positions have no such limit.

    Imported models (docs/importing.md) set hparams the paper's models leave at its choices:
    `ffn_activation`, `attention_bias`, `sinusoid_layout`, `logits_bias` (a trained bias
    added to the output logits), `zero_pad_embedding` and `encoder_input_bias` (a trained
    vector added to every encoder input position: tensor2tensor's target-space embedding);
    a run saved before they existed
    gets those choices (`hparams.ADDED_MODEL_HPARAMS`).

    With hparam `self_attention_window` = r > 0, encoder and decoder self-attention are
    restricted (paper Table 1, row 4): position i attends to positions j with |i - j| < r (the
    decoder to i - r < j <= i), at O(r·n) cost; encoder-decoder attention stays full, and the
    incremental decoder keeps only the last r positions' keys and values.

    With hparam `fused_attention`, attention that returns no weights goes through
    `keras.ops.dot_product_attention` (`MultiHeadAttention`'s `fused`): the same model.

    Reference: Vaswani et al., "Attention Is All You Need", 2017.
    """

    def __init__(self, hparams, input_vocab_size, target_vocab_size, decoding_copy=False,
                 **kwargs):
        if isinstance(hparams, dict):
            hparams = HParams(**hparams)
        hparams = HParams(**{**ADDED_MODEL_HPARAMS, **hparams.values()})
        check_model_hparams(hparams)
        for name, size in (("input_vocab_size", input_vocab_size),
                           ("target_vocab_size", target_vocab_size)):
            if not is_whole_number(size) or size < 1:
                raise ConfigurationError(f"Transformer's {name}={size!r} must be the size of "
                                         f"a vocabulary: a whole number, 1 or more.")
        super().__init__(**kwargs)
        _check_dtype_policy(self.dtype_policy, decoding_copy)
        self.hparams = hparams
        self.input_vocab_size = input_vocab_size
        self.target_vocab_size = target_vocab_size
        hp = hparams
        # Runs saved before restricted self-attention existed have no such hparam: full.
        self.self_attention_window = (hp.self_attention_window
                                      if "self_attention_window" in hp else 0)
        if hp.shared_source_target_embedding and input_vocab_size != target_vocab_size:
            raise HParamsError(
                f"hparam shared_source_target_embedding=true needs one vocabulary for sources "
                f"and targets, but input_vocab_size={input_vocab_size} and target_vocab_size="
                f"{target_vocab_size}. Set shared_source_target_embedding=false for separate "
                f"source and target embeddings, or use one shared vocabulary."
            )
        self.target_embedding = SharedEmbedding(
            target_vocab_size, hp.hidden_size, zero_pad=hp.zero_pad_embedding,
            name="target_embedding", dtype=self.dtype_policy
        )
        if hp.shared_source_target_embedding:
            self.input_embedding = self.target_embedding
        else:
            self.input_embedding = SharedEmbedding(
                input_vocab_size, hp.hidden_size, zero_pad=hp.zero_pad_embedding,
                name="input_embedding", dtype=self.dtype_policy
            )
        self.softmax_projection = (
            None
            if hp.shared_embedding_and_softmax_weights
            else keras.layers.Dense(target_vocab_size, use_bias=False, name="softmax_projection",
                                    dtype=self.dtype_policy)
        )
        self.encoder_position = _position_layer(hp, "encoder_position", self.dtype_policy)
        self.decoder_position = _position_layer(hp, "decoder_position", self.dtype_policy)
        self.encoder_input_dropout = keras.layers.Dropout(hp.layer_prepostprocess_dropout,
                                                          dtype=self.dtype_policy)
        self.decoder_input_dropout = keras.layers.Dropout(hp.layer_prepostprocess_dropout,
                                                          dtype=self.dtype_policy)
        layer_args = dict(
            hidden_size=hp.hidden_size,
            num_heads=hp.num_heads,
            intermediate_dim=hp.filter_size,
            key_dim=(hp.attention_key_channels or hp.hidden_size) // hp.num_heads,
            value_dim=(hp.attention_value_channels or hp.hidden_size) // hp.num_heads,
            dropout=hp.layer_prepostprocess_dropout,
            attention_dropout=hp.attention_dropout,
            relu_dropout=hp.relu_dropout,
            normalize_first=hp.normalize_first,
            layer_norm_epsilon=hp.layer_norm_epsilon,
            self_attention_window=self.self_attention_window,
            ffn_activation=hp.ffn_activation,
            attention_bias=hp.attention_bias,
            fused_attention=hp.fused_attention,
        )
        self.encoder_layers = [
            TransformerEncoderLayer(**layer_args, name=f"encoder_layer_{i}",
                                    dtype=self.dtype_policy)
            for i in range(hp.num_encoder_layers or hp.num_hidden_layers)
        ]
        self.decoder_layers = [
            TransformerDecoderLayer(**layer_args, name=f"decoder_layer_{i}",
                                    dtype=self.dtype_policy)
            for i in range(hp.num_decoder_layers or hp.num_hidden_layers)
        ]
        # Pre-norm leaves each stack's output unnormalised, so it ends with one more LayerNorm.
        self.encoder_final_norm = self._final_norm("encoder_final_norm")
        self.decoder_final_norm = self._final_norm("decoder_final_norm")

    def build(self, features_shape):
        """Creates every weight from the feature shapes `{"inputs": (batch, s), "targets":
        (batch, t)}`, without tracing `call` (which Keras would otherwise do)."""
        source_hidden = (*features_shape["inputs"], self.hparams.hidden_size)
        target_hidden = (*features_shape["targets"], self.hparams.hidden_size)
        self.target_embedding.build()
        if self.input_embedding is not self.target_embedding:
            self.input_embedding.build()
        for position, hidden_shape in (
            (self.encoder_position, source_hidden),
            (self.decoder_position, target_hidden),
        ):
            position.build(hidden_shape)
        for layer in self.encoder_layers:
            layer.build(source_hidden)
        for layer in self.decoder_layers:
            layer.build(target_hidden, source_hidden)
        for norm, hidden_shape in (
            (self.encoder_final_norm, source_hidden),
            (self.decoder_final_norm, target_hidden),
        ):
            if norm is not None:
                norm.build(hidden_shape)
        if self.softmax_projection is not None:
            self.softmax_projection.build(target_hidden)
        if self.hparams.logits_bias:
            self.final_logits_bias = self.add_weight(
                shape=(self.target_vocab_size,), initializer="zeros", name="final_logits_bias")
        if self.hparams.encoder_input_bias:
            self.encoder_input_bias = self.add_weight(
                shape=(self.hparams.hidden_size,), initializer="zeros", name="encoder_input_bias")
        self.built = True

    def _final_norm(self, name):
        if not self.hparams.normalize_first:
            return None
        return keras.layers.LayerNormalization(epsilon=self.hparams.layer_norm_epsilon, name=name,
                                                dtype=self.dtype_policy)

    @property
    def max_positions(self):
        """The most positions a source or decoder input may have: `hparams.max_length` with
        learned positions (the rows of the table), None (no limit) with sinusoids."""
        if self.hparams.position_encoding == "learned":
            return self.hparams.max_length
        return None

    def check_length(self, length, what):
        """Raises a ValueError naming hparam max_length if `length` positions of `what` (e.g.
        "source") do not fit the position table; a length unknown until run time passes."""
        limit = self.max_positions
        if limit is not None and isinstance(length, int) and length > limit:
            raise ValueError(
                f"The {what} has {length} positions, but the learned position table has "
                f"only hparam max_length={limit} rows. Use at most {limit} positions, or "
                f"train a model with a larger max_length."
            )

    def _embed(self, ids, embedding, position, dropout, training, start_index=0, positions=None,
               bias=None):
        x = embedding(ids)
        if bias is not None:
            x = x + ops.cast(bias, x.dtype)
        x = x + position(x, start_index=start_index, positions=positions)
        return dropout(x, training=training)

    def encode(self, inputs, training=None, attention_scores=None, segmentation=None,
               positions=None):
        """Source ids [batch, s] -> (memory [batch, s, d], memory_mask [batch, 1, s]).

        A dict passed as `attention_scores` receives each layer's attention weights under the
        layer's name (see `attention_weights`). Packed rows give their `segmentation` and
        `positions` [batch, s] (`PACKING_FEATURES`): self-attention stays within each pair.
        """
        self.check_length(ops.shape(inputs)[1], "source")
        memory_mask = padding_mask(inputs)
        self_mask = memory_mask if segmentation is None else same_segment_mask(segmentation,
                                                                               segmentation)
        x = self._embed(inputs, self.input_embedding, self.encoder_position,
                        self.encoder_input_dropout, training, positions=positions,
                        bias=self.encoder_input_bias if self.hparams.encoder_input_bias else None)
        for layer in self.encoder_layers:
            x = _call_layer(
                layer, attention_scores, x, attention_mask=self_mask, training=training
            )
        if self.encoder_final_norm is not None:
            x = self.encoder_final_norm(x)
        return x, memory_mask

    def decode(self, decoder_inputs, memory, memory_mask, training=None, attention_scores=None,
               self_attention_mask=None, positions=None, project=True):
        """Decoder input ids [batch, t] attending to `memory` -> logits [batch, t, vocab]
        (with `project=False`, what `call` returns with it). Packed rows give a
        `self_attention_mask` [batch, t, t] (on top of the causal one), a `memory_mask`
        [batch, t, s] and `positions` [batch, t] that keep each pair apart."""
        self.check_length(ops.shape(decoder_inputs)[1], "decoder input")
        x = self._embed(decoder_inputs, self.target_embedding, self.decoder_position,
                        self.decoder_input_dropout, training, positions=positions)
        for layer in self.decoder_layers:  # their self-attention is causal by itself
            x = _call_layer(
                layer,
                attention_scores,
                x,
                memory,
                self_attention_mask=self_attention_mask,
                memory_mask=memory_mask,
                training=training,
            )
        if not project:
            return self._final_hidden(x), *self._output_projection_and_bias()
        return self._logits(x)

    def _final_hidden(self, x):
        return x if self.decoder_final_norm is None else self.decoder_final_norm(x)

    def _output_projection_and_bias(self):
        """The output projection [V, d] as stored and the float32 logits bias [V] (None
        without one): logits = hidden·projectionᵀ + bias."""
        if self.softmax_projection is not None:
            projection = ops.transpose(self.softmax_projection.kernel)
        else:
            projection = ops.convert_to_tensor(self.target_embedding.embeddings)
        bias = (ops.cast(self.final_logits_bias, "float32") if self.hparams.logits_bias
                else None)
        return projection, bias

    def _logits(self, x, output_projection=None):
        """Next-token logits, float32 under every dtype policy: the loss and the beam search
        take log-softmaxes of them. `output_projection`: `decoding_projection()`'s."""
        x = self._final_hidden(x)
        if self.softmax_projection is not None:
            logits = ops.cast(self.softmax_projection(x), "float32")
        else:
            logits = ops.cast(self.target_embedding.logits(x, output_projection), "float32")
        if self.hparams.logits_bias:
            logits = logits + ops.cast(self.final_logits_bias, "float32")
        return logits

    def decoding_projection(self):
        """The output projection as `decode_step` multiplies by it fastest, to compute once per
        batch: the shared embedding transposed (`SharedEmbedding.output_projection`) for
        TensorFlow's float32 matmul (oneDNN's, 1.5-3x faster so at decoding's shapes). None
        where the embedding as stored is as fast (bfloat16, and the JAX backend, whose XLA
        lays out operands itself) or a softmax layer of its own is so laid out already."""
        if (self.softmax_projection is not None or self.compute_dtype != "float32"
                or keras.backend.backend() != "tensorflow"):
            return None
        return self.target_embedding.output_projection(self.compute_dtype)

    def decoding_kernels(self):
        """Each decoder layer's kernels laid out [units, inputs]
        (`TransformerDecoderLayer.laid_out_kernels`), for `decode_step`, to compute once per
        batch: TensorFlow's float32 matmul multiplies decoding's rows by them 1.3-2x faster on
        an x86 CPU without AVX-512 (`layers.dense_layout`). None elsewhere (measured on AVX2
        only), in bfloat16, for quantized weights and on JAX."""
        if (self.compute_dtype != "float32" or keras.backend.backend() != "tensorflow"
                or not is_x86_without_avx512()):
            return None
        kernels = [layer.laid_out_kernels() for layer in self.decoder_layers]
        return None if any(None in layer.values() for layer in kernels) else kernels

    def memory_key_values(self, memory):
        """Each decoder layer's encoder-decoder keys and values of `memory`, for `decode_step`:
        computed once per sentence instead of once per output position."""
        return [layer.cross_attention.project_key_value(memory) for layer in self.decoder_layers]

    def empty_decode_cache(self, batch_size, max_decode_length, beam_size=1, dtype=None):
        """The incremental decoder's state for `beam_size` hypotheses of `batch_size`
        sentences, all zero: `{"keys_values": each decoder layer's (keys, values) [batch,
        heads, beam, max_decode_length, d], "slots": int32 [batch, beam, max_decode_length]}`.

        Keys and values are in `dtype` (default: the compute dtype, which the projected ones
        have). `decode_step` writes hypothesis i's keys and values of a position into slot i;
        `slots[b, i, p]` names the slot that holds position p of hypothesis i, so that beam
        search reorders hypotheses by reordering `slots` alone (`reorder_decode_cache`)
        instead of copying every layer's keys and values at every step. With hparam
        `self_attention_window` = r the cache holds min(r, `max_decode_length`) positions: a
        ring of the last r, position p at index p % r (`cache_reads.cached_positions`).
        """
        dtype = dtype or self.compute_dtype
        window = self.self_attention_window
        if window:  # the cache is a ring: the last `window` positions are all that is read
            max_decode_length = (min(max_decode_length, window)
                                 if isinstance(max_decode_length, int)
                                 else ops.minimum(max_decode_length, window))
        keys_values = []
        for layer in self.decoder_layers:
            attention = layer.self_attention
            shape = (batch_size, attention.num_heads, beam_size, max_decode_length)
            keys_values.append((ops.zeros((*shape, attention.key_dim), dtype),
                                ops.zeros((*shape, attention.value_dim), dtype)))
        slots = ops.zeros((batch_size, beam_size, max_decode_length), "int32")
        return {"keys_values": keys_values, "slots": slots}

    @staticmethod
    def reorder_decode_cache(cache, parent_beams):
        """The cache after beam search keeps, as hypothesis i of each sentence, the extension
        of its hypothesis `parent_beams[b, i]` ([batch, beam] int32): only `slots` moves."""
        return {"keys_values": cache["keys_values"],
                "slots": take_rows(cache["slots"], ops.cast(parent_beams, "int32"))}

    def decode_step(self, ids, position, cache, memory_key_values, memory_mask,
                    output_projection=None, layer_kernels=None):
        """Incremental decoding: the decoder input ids at `position` -> (next-token logits,
        the cache with `position` filled).

        `ids` is [batch, beam] (beam hypotheses per sentence, sharing their sentence's
        `memory_key_values` and `memory_mask`) giving logits [batch, beam, vocab], or [batch]
        (one hypothesis each) giving [batch, vocab]. `cache` comes from `empty_decode_cache`.
        Equals `decode(...)[:, position]` over each hypothesis's whole prefix, at the cost of
        one position. `position` may be a tensor, so it is not checked here: the caller keeps
        it below `max_positions` (as `TransformerBeamSearch` does). `output_projection` and
        `layer_kernels`: `decoding_projection()` and `decoding_kernels()`, computed once for
        all the steps of a batch.
        """
        one_per_sentence = len(ops.shape(ids)) == 1
        ids = ops.expand_dims(ids, 1) if one_per_sentence else ids
        batch, beam = ops.shape(ids)[0], ops.shape(ids)[1]
        x = self._embed(
            ops.reshape(ids, (-1, 1)),
            self.target_embedding,
            self.decoder_position,
            self.decoder_input_dropout,
            training=False,
            start_index=position,
        )
        x = ops.reshape(x, (batch, beam, self.hparams.hidden_size))
        slots, self_mask = slots_and_mask(cache["slots"], position)
        self_mask = mask_to_read(self_mask, position)
        keys_values = []
        for layer, layer_cache, memory_key_value, kernels in zip(
            self.decoder_layers, cache["keys_values"], memory_key_values,
            layer_kernels or [None] * len(self.decoder_layers)
        ):
            x, layer_cache = layer.decode_step(x, position, layer_cache, memory_key_value,
                                               memory_mask, self_mask, kernels)
            keys_values.append(layer_cache)
        logits = self._logits(x, output_projection)
        logits = logits[:, 0] if one_per_sentence else logits
        return logits, {"keys_values": keys_values, "slots": slots}

    def call(self, features, training=None, project=True):
        """Teacher-forced logits of `features` (`_teacher_forced`). With `project=False`,
        instead of them, `(hidden, projection, bias)`: the final hidden states [batch, t, d],
        the output projection [V, d] and the logits bias [V] (None without one), whose
        `hidden · projectionᵀ + bias` the logits are, for a loss that projects a chunk of
        tokens at a time (`training.chunked_loss`)."""
        return self._teacher_forced(features, training, project=project)

    def _teacher_forced(self, features, training=None, attention_scores=None, project=True):
        """Logits of `features` {"inputs", "targets"}, or of packed rows with
        `PACKING_FEATURES` too: then each pair attends only to itself and its positions
        restart, so every pair gets the logits it gets alone."""
        if not is_packed(features):
            memory, memory_mask = self.encode(features["inputs"], training, attention_scores)
            return self.decode(shift_right(features["targets"]), memory, memory_mask, training,
                               attention_scores, project=project)
        if self.self_attention_window:
            raise HParamsError(_PACKED_NEEDS_FULL_ATTENTION)
        source_segments, target_segments = (features["inputs_segmentation"],
                                            features["targets_segmentation"])
        memory, _ = self.encode(features["inputs"], training, attention_scores,
                                segmentation=source_segments,
                                positions=features["inputs_position"])
        return self.decode(
            shift_right(features["targets"], features["targets_position"]), memory,
            same_segment_mask(target_segments, source_segments), training, attention_scores,
            self_attention_mask=same_segment_mask(target_segments, target_segments),
            positions=features["targets_position"], project=project)

    def attention_weights(self, features):
        """Every layer's attention weights on teacher-forced `features` (packed rows too), for
        visualisation.

        Returns {"encoder_layer_i": [batch, heads, s, s], "decoder_layer_i": {"self": [batch,
        heads, t, t], "cross": [batch, heads, t, s]}}; each row sums to 1 over the keys.
        """
        scores = {}
        self._teacher_forced(features, attention_scores=scores)
        return scores

    def build_weights(self):
        """Creates every weight now (subclassed models otherwise build on their first call)."""
        self.build({"inputs": (None, None), "targets": (None, None)})
        return self

    def get_config(self):
        return {
            "hparams": self.hparams.values(),
            "input_vocab_size": self.input_vocab_size,
            "target_vocab_size": self.target_vocab_size,
            "name": self.name,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
        }
