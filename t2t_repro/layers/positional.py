"""Positional information: the paper's sinusoids (§3.5) and learned embeddings (Table 3 row E)."""

import keras
from keras import ops


def sinusoidal_position_encoding(length, hidden_size, start_index=0):
    """[length, hidden_size]: PE(pos, 2i) = sin(pos/10000^(2i/d)), PE(pos, 2i+1) = cos(...).

    Even channels hold sines and odd channels cosines, interleaved exactly as the paper writes
    it. tensor2tensor's `add_timing_signal_1d` is a different encoding, not a reordering of
    this one: it concatenates all sines then all cosines, and spaces its d/2 frequencies
    geometrically from 1 to 1/10⁴ by log(10⁴)/(d/2 − 1), where the paper's step is
    log(10⁴)/(d/2) and its lowest frequency 10000^(−(d−2)/d).
    """
    if hidden_size % 2:
        raise ValueError(f"sinusoidal encoding needs an even hidden_size, got {hidden_size}.")
    positions = ops.cast(ops.arange(length) + start_index, "float32")
    pair_index = ops.cast(ops.arange(hidden_size // 2), "float32")
    inverse_frequencies = ops.power(10000.0, -2.0 * pair_index / hidden_size)
    angles = ops.expand_dims(positions, 1) * ops.expand_dims(inverse_frequencies, 0)
    interleaved = ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1)
    return ops.reshape(interleaved, (length, hidden_size))


@keras.saving.register_keras_serializable(package="t2t_repro")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """Returns the sinusoidal encoding [length, d] for inputs [batch, length, d]; no weights.

    `start_index` offsets the positions, for decoding one position at a time.

    Reference: Vaswani et al., "Attention Is All You Need", 2017, §3.5.
    """

    def call(self, inputs, start_index=0):
        shape = ops.shape(inputs)
        encoding = sinusoidal_position_encoding(shape[1], shape[2], start_index)
        return ops.cast(encoding, inputs.dtype)


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

    def call(self, inputs, start_index=0):
        length = ops.shape(inputs)[1]
        encoding = ops.slice(self.position_embeddings, (start_index, 0), (length, self.hidden_size))
        return ops.cast(encoding, inputs.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(max_length=self.max_length, hidden_size=self.hidden_size)
        return config
