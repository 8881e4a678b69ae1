"""Positional information: the paper's sinusoids (§3.5) and learned embeddings (Table 3 row E)."""

import math

import keras
from keras import ops


# The layouts of the sinusoids (hparam `sinusoid_layout`): the paper's, and tensor2tensor's
# `add_timing_signal_1d`, which Marian (and so every OPUS-MT model) computes too.
SINUSOID_LAYOUTS = ("interleaved", "halves")


def sinusoidal_position_encoding(length, hidden_size, start_index=0, layout="interleaved"):
    """[length, hidden_size]: PE(pos, 2i) = sin(pos/10000^(2i/d)), PE(pos, 2i+1) = cos(...).

    With `layout="interleaved"` even channels hold sines and odd channels cosines, exactly as
    the paper writes it. `layout="halves"` is tensor2tensor's `add_timing_signal_1d` and
    Marian's encoding, a different one, not a reordering of this: all sines then all cosines,
    the d/2 frequencies spaced geometrically from 1 to 1/10⁴ by log(10⁴)/(d/2 − 1), where the
    paper's step is log(10⁴)/(d/2) and its lowest frequency 10000^(−(d−2)/d).
    """
    return sinusoids_at(ops.arange(length) + start_index, hidden_size, layout)


def sinusoids_at(positions, hidden_size, layout="interleaved"):
    """The encoding of `positions` (int, of any shape; packed rows restart them at each pair):
    [*positions.shape, hidden_size], in the `layout` of `sinusoidal_position_encoding`."""
    if hidden_size % 2:
        raise ValueError(f"sinusoidal encoding needs an even hidden_size, got {hidden_size}.")
    if layout not in SINUSOID_LAYOUTS:
        raise ValueError(f"sinusoid layout must be one of {SINUSOID_LAYOUTS}, got '{layout}'.")
    positions = ops.cast(positions, "float32")
    half = hidden_size // 2
    pair_index = ops.cast(ops.arange(half), "float32")
    if layout == "halves":
        inverse_frequencies = ops.exp(-pair_index * math.log(10000.0) / max(half - 1, 1))
    else:
        inverse_frequencies = ops.power(10000.0, -2.0 * pair_index / hidden_size)
    angles = ops.expand_dims(positions, -1) * inverse_frequencies
    if layout == "halves":
        return ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)
    interleaved = ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1)
    return ops.reshape(interleaved, (*ops.shape(positions), hidden_size))


@keras.saving.register_keras_serializable(package="t2t_repro")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """Returns the sinusoidal encoding [length, d] for inputs [batch, length, d]; no weights.

    `start_index` offsets the positions, for decoding one position at a time; `positions`
    [batch, length] gives each token's own (packed rows), and the encoding [batch, length, d].
    `layout`: one of `SINUSOID_LAYOUTS` (`sinusoidal_position_encoding`).

    Reference: Vaswani et al., "Attention Is All You Need", 2017, §3.5.
    """

    def __init__(self, layout="interleaved", **kwargs):
        super().__init__(**kwargs)
        self.layout = layout

    def call(self, inputs, start_index=0, positions=None):
        shape = ops.shape(inputs)
        if positions is not None:
            return ops.cast(sinusoids_at(positions, shape[2], self.layout), inputs.dtype)
        encoding = sinusoidal_position_encoding(shape[1], shape[2], start_index, self.layout)
        return ops.cast(encoding, inputs.dtype)

    def get_config(self):
        return {**super().get_config(), "layout": self.layout}


@keras.saving.register_keras_serializable(package="t2t_repro")
class LearnedPositionEmbedding(keras.layers.Layer):
    """A trained [max_length, d] table of positions (Table 3 row E).

    It has no row past `max_length`: `start_index` + length must not exceed it
    (`Transformer.check_length` raises a clear error before a longer sequence gets here).

    Args:
        max_length: the longest sequence it can encode.
        hidden_size: d_model.
    """

    def __init__(self, max_length, hidden_size, **kwargs):
        super().__init__(**kwargs)
        self.max_length = max_length
        self.hidden_size = hidden_size

    def build(self, input_shape=None):
        self.position_embeddings = self.add_weight(
            shape=(self.max_length, self.hidden_size),
            initializer=keras.initializers.RandomNormal(stddev=self.hidden_size**-0.5),
            name="position_embeddings",
        )

    def call(self, inputs, start_index=0, positions=None):
        if positions is not None:  # [batch, length]: each token's own (packed rows)
            return ops.cast(ops.take(self.position_embeddings, positions, axis=0), inputs.dtype)
        length = ops.shape(inputs)[1]
        encoding = ops.slice(self.position_embeddings, (start_index, 0), (length, self.hidden_size))
        return ops.cast(encoding, inputs.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(max_length=self.max_length, hidden_size=self.hidden_size)
        return config
