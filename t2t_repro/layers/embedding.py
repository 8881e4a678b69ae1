"""One embedding matrix for the source embedding, target embedding and pre-softmax projection."""

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="t2t_repro")
class SharedEmbedding(keras.layers.Layer):
    """Token embedding scaled by √d_model, whose matrix also gives the output logits.

    `call(ids)` embeds; `logits(hidden)` projects back to the vocabulary with the same matrix
    transposed (paper §3.4), so one variable serves every role it is used in.

    Args:
        vocab_size: number of token ids.
        hidden_size: d_model.

    Example:
    >>> embedding = SharedEmbedding(vocab_size=100, hidden_size=16)
    >>> hidden = embedding(ops.convert_to_tensor([[5, 7, 0]]))
    >>> embedding.logits(hidden).shape
    (1, 3, 100)

    Reference: Vaswani et al., "Attention Is All You Need", 2017, §3.4.
    """

    def __init__(self, vocab_size, hidden_size, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size

    def build(self, input_shape=None):
        # Variance 1/d_model keeps embeddings × √d_model at unit scale, as in tensor2tensor.
        self.embeddings = self.add_weight(
            shape=(self.vocab_size, self.hidden_size),
            initializer=keras.initializers.RandomNormal(stddev=self.hidden_size**-0.5),
            name="embeddings",
        )

    def call(self, ids):
        if not self.built:
            self.build()
        ids = ops.cast(ids, "int32")
        return ops.take(self.embeddings, ids, axis=0) * math.sqrt(self.hidden_size)

    def logits(self, hidden):
        """[..., hidden_size] -> [..., vocab_size] with the transposed embedding matrix."""
        return ops.matmul(hidden, ops.transpose(ops.cast(self.embeddings, hidden.dtype)))

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.hidden_size)

    def get_config(self):
        config = super().get_config()
        config.update(vocab_size=self.vocab_size, hidden_size=self.hidden_size)
        return config
