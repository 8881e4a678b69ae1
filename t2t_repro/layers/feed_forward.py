"""Position-wise feed-forward network (paper §3.3)."""

import keras
from keras import ops

from t2t_repro.layers.dense_layout import dense, laid_out_kernels

# The inner activations (hparam `ffn_activation`): the paper's ReLU; Swish (x·σ(x)), which
# OPUS-MT's models use; GELU (exact, with erf); and Marian's "gelu", x·σ(1.702x).
FFN_ACTIVATIONS = {
    "relu": ops.relu,
    "swish": ops.silu,
    "gelu": lambda x: ops.gelu(x, approximate=False),
    "gelu_sigmoid": lambda x: x * ops.sigmoid(1.702 * x),
}


@keras.saving.register_keras_serializable(package="t2t_repro")
class PositionwiseFeedForward(keras.layers.Layer):
    """FFN(x) = max(0, xW1 + b1)W2 + b2, applied to every position alike.

    Args:
        intermediate_dim: d_ff, the inner size (2048 in the base model).
        output_dim: size of the output; defaults to the input's last dimension.
        dropout: dropout on the ReLU activations ("relu_dropout", 0 in the paper).
        activation: a name of `FFN_ACTIVATIONS` in place of the paper's max(0, ·).

    Example:
    >>> ffn = PositionwiseFeedForward(intermediate_dim=2048)
    >>> ffn(keras.random.normal((2, 10, 512))).shape
    (2, 10, 512)

    Reference: Vaswani et al., "Attention Is All You Need", 2017, §3.3.
    """

    def __init__(self, intermediate_dim, output_dim=None, dropout=0.0, activation="relu",
                 **kwargs):
        super().__init__(**kwargs)
        if activation not in FFN_ACTIVATIONS:
            raise ValueError(f"activation must be one of {tuple(FFN_ACTIVATIONS)}, got "
                             f"'{activation}'.")
        self.intermediate_dim = intermediate_dim
        self.output_dim = output_dim
        self.dropout = dropout
        self.activation = activation
        self.inner_dense = keras.layers.Dense(intermediate_dim,
                                              activation=FFN_ACTIVATIONS[activation],
                                              name="inner", dtype=self.dtype_policy)
        self.relu_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.output_dense = None

    def build(self, input_shape):
        self.inner_dense.build(input_shape)
        self.output_dense = keras.layers.Dense(self.output_dim or input_shape[-1], name="output",
                                               dtype=self.dtype_policy)
        self.output_dense.build((*input_shape[:-1], self.intermediate_dim))

    def call(self, x, training=None, kernels=None):
        """`kernels`: `laid_out_kernels()`'s, for a decoding step."""
        kernels = kernels or {}
        hidden = self.relu_dropout(dense(self.inner_dense, x, kernels.get("inner")),
                                   training=training)
        return dense(self.output_dense, hidden, kernels.get("output"))

    def laid_out_kernels(self):
        """Both kernels laid out for a decoding loop (`dense_layout`)."""
        return laid_out_kernels({"inner": self.inner_dense, "output": self.output_dense})

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.output_dim or input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            intermediate_dim=self.intermediate_dim,
            output_dim=self.output_dim,
            dropout=self.dropout,
            activation=self.activation,
        )
        return config
