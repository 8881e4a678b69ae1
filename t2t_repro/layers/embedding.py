"""One embedding matrix for the source embedding, target embedding and pre-softmax projection."""

import math

import keras
from keras import ops

from t2t_repro.names import PAD_ID


@keras.saving.register_keras_serializable(package="t2t_repro")
class SharedEmbedding(keras.layers.Layer):
    """Token embedding scaled by √d_model, whose matrix also gives the output logits.

    `call(ids)` embeds; `logits(hidden)` projects back to the vocabulary with the same matrix
    transposed (paper §3.4), so one variable serves every role it is used in.

    Args:
        vocab_size: number of token ids.
        hidden_size: d_model.
        zero_pad: id 0 (padding, and the decoder's start symbol) embeds as a zero vector,
            whatever its row holds: Marian's decoder starts from zeros, and tensor2tensor's
            symbol modality zeroes padding's embedding. Its row still gives id 0's logit.

    Example:
    >>> embedding = SharedEmbedding(vocab_size=100, hidden_size=16)
    >>> hidden = embedding(ops.convert_to_tensor([[5, 7, 0]]))
    >>> embedding.logits(hidden).shape
    (1, 3, 100)

    Reference: Vaswani et al., "Attention Is All You Need", 2017, §3.4.
    """

    def __init__(self, vocab_size, hidden_size, zero_pad=False, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.zero_pad = zero_pad

    def build(self, input_shape=None):
        # Variance 1/d_model keeps embeddings × √d_model at unit scale, as in tensor2tensor.
        self.embeddings = self.add_weight(
            shape=(self.vocab_size, self.hidden_size),
            initializer=keras.initializers.RandomNormal(stddev=self.hidden_size**-0.5),
            name="embeddings",
            # Read as stored, not cast to a mixed policy's compute dtype: the lookup's gradient
            # is a scatter-add into the whole matrix, which in bfloat16 rounds every addition
            # and took 13.6 ms of a 70 ms transformer_base step on an H200 (0.55 ms in
            # float32). `call` casts the gathered rows instead.
            autocast=False,
        )

    def call(self, ids):
        if not self.built:
            self.build()
        ids = ops.cast(ids, "int32")
        embedded = ops.take(self.embeddings, ids, axis=0) * math.sqrt(self.hidden_size)
        embedded = ops.cast(embedded, self.compute_dtype)
        if self.zero_pad:
            embedded = embedded * ops.cast(ops.expand_dims(ids != PAD_ID, -1), embedded.dtype)
        return embedded

    def logits(self, hidden, projection=None):
        """[..., hidden_size] -> [..., vocab_size] with the transposed embedding matrix, or
        with `projection`, `output_projection()` computed earlier."""
        if projection is None:
            projection = self.output_projection(hidden.dtype)
        return ops.matmul(hidden, projection)

    def output_projection(self, dtype):
        """The embedding matrix transposed, [hidden_size, vocab_size] in `dtype`. On CPUs,
        oneDNN multiplies a few rows by it 1.5-3x faster than by the matrix as stored (its
        transposed operand), so an incremental decoder transposes it once per batch and
        passes it to `logits` at every step."""
        return ops.transpose(ops.cast(self.embeddings, dtype))

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.hidden_size)

    def get_config(self):
        config = super().get_config()
        config.update(vocab_size=self.vocab_size, hidden_size=self.hidden_size,
                      zero_pad=self.zero_pad)
        return config
