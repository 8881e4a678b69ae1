"""The training loss computed a chunk of target tokens at a time, from the decoder's final
hidden states and the output projection, so that the [tokens, vocabulary] logits never exist
whole.

On bench train's batch (transformer_base, 4,077 target positions, a 37,000-piece vocabulary) one
float32 copy of the logits is 600 MB, and the loss and its gradient make several. Here each
chunk's logits give the chunk's loss sums and, in the same pass, its share of the gradient with
respect to the hidden states, the projection and the logits bias; the gradient is only scaled
by the upstream gradient afterwards. The projection's multiplications are the same as those of
automatic differentiation through the whole logits, so the step costs the same FLOPs. There
the step's peak resident memory falls from 7.1 to 5.9 GiB, and it is no slower
(docs/performance.md, "Training"). Evaluation (`local_evaluation`, on every backend and
strategy) takes the same sums chunk by chunk, without the gradient (`chunked_sums`).
"""

from keras import ops

from t2t_repro.hparams import ADDED_MODEL_HPARAMS
from t2t_repro.training.losses import logits_gradient, token_losses, token_mask

DEFAULT_CHUNK_TOKENS = ADDED_MODEL_HPARAMS["loss_chunk_tokens"]


def hparams_chunk_tokens(hparams):
    """hparam loss_chunk_tokens (the default in a run saved before it existed)."""
    return (hparams.loss_chunk_tokens if "loss_chunk_tokens" in hparams
            else DEFAULT_CHUNK_TOKENS)


def chunked_loss_sums(hidden, projection, labels, smoothing, chunk_tokens, bias=None):
    """Sums over the non-padding target tokens of the label-smoothed loss, the nll and the
    correct argmax predictions of the logits `hidden · projectionᵀ + bias`.

    Args:
        hidden: [batch, length, d] final hidden states (the model's compute dtype).
        projection: [V, d], cast to `hidden`'s dtype; logits are float32 from there on.
        labels: [batch, length] target ids, 0 at padding.
        smoothing: label smoothing ε (`losses.label_smoothed_cross_entropy`).
        chunk_tokens: target positions per chunk (padding included), at least 1; above the
            batch's positions, one chunk of them.
        bias: [V] float32 logits bias, or None.

    Returns:
        `(loss_sum, nll_sum, correct)`, float32 scalars. Only `loss_sum` is differentiable
        (with respect to `hidden`, `projection` and `bias`); the other two are reported.
    """
    chunks = _Chunks(hidden, labels, chunk_tokens)
    projection = ops.cast(projection, hidden.dtype)
    depth, vocab_size = chunks.depth, int(ops.shape(projection)[0])
    with_bias = bias is not None

    @ops.custom_gradient
    def loss_sums(hidden, projection, *maybe_bias):
        padded_hidden = chunks.padded_hidden(hidden)
        # Laid out [d, V] once, so that no chunk transposes a [V, d] or [chunk, V] operand.
        transposed_projection = ops.transpose(projection)

        def chunk_step(index, carry):
            sums, hidden_gradient, transposed_projection_gradient, bias_gradient = carry
            start = index * chunks.chunk_tokens
            chunk_hidden, chunk_labels = chunks.chunk(index, padded_hidden)
            chunk_sums, logits, log_normalizer, mask = _chunk_sums(
                chunk_hidden, chunk_labels, transposed_projection,
                maybe_bias[0] if with_bias else None, smoothing)
            sums = sums + chunk_sums
            gradient = logits_gradient(logits, log_normalizer, chunk_labels, smoothing, mask,
                                       0.0)
            low_precision_gradient = ops.cast(gradient, hidden.dtype)
            hidden_gradient = ops.scatter_update(  # rows start.. (no XLA op under TensorFlow)
                hidden_gradient, (start + ops.arange(chunks.chunk_tokens))[:, None],
                ops.matmul(low_precision_gradient, projection))
            transposed_projection_gradient = transposed_projection_gradient + ops.cast(
                ops.matmul(ops.transpose(chunk_hidden), low_precision_gradient), "float32")
            if with_bias:
                bias_gradient = bias_gradient + ops.sum(gradient, axis=0)
            return sums, hidden_gradient, transposed_projection_gradient, bias_gradient

        initial = (ops.zeros((3,), "float32"), ops.zeros_like(padded_hidden),
                   ops.zeros((depth, vocab_size), "float32"),
                   ops.zeros((vocab_size,), "float32"))
        sums, hidden_gradient, transposed_projection_gradient, bias_gradient = ops.fori_loop(
            0, chunks.count, chunk_step, initial)
        hidden_gradient = ops.reshape(hidden_gradient[:chunks.tokens], ops.shape(hidden))
        projection_gradient = ops.transpose(transposed_projection_gradient)
        gradients = (hidden_gradient, ops.cast(projection_gradient, projection.dtype),
                     *([bias_gradient] if with_bias else []))

        def gradient(*args, upstream=None):
            if upstream is None:  # TensorFlow: one argument per output; JAX: their tuple
                upstream = args[0] if len(args) == 1 else args
            loss_upstream = upstream[0]
            return tuple(ops.cast(loss_upstream, g.dtype) * g for g in gradients)

        return (sums[0], sums[1], sums[2]), gradient

    loss_sum, nll_sum, correct = loss_sums(hidden, projection, *([bias] if with_bias else []))
    return loss_sum, ops.stop_gradient(nll_sum), ops.stop_gradient(correct)


def chunked_sums(hidden, projection, labels, smoothing, chunk_tokens, bias=None):
    """`chunked_loss_sums`' three sums without their gradient, for evaluation: the same chunks,
    so that an evaluation batch as large as a training batch does not make the whole logits
    either."""
    chunks = _Chunks(hidden, labels, chunk_tokens)
    padded_hidden = chunks.padded_hidden(hidden)
    transposed_projection = ops.transpose(ops.cast(projection, hidden.dtype))

    def chunk_step(index, sums):
        chunk_hidden, chunk_labels = chunks.chunk(index, padded_hidden)
        return sums + _chunk_sums(chunk_hidden, chunk_labels, transposed_projection, bias,
                                  smoothing)[0]

    sums = ops.fori_loop(0, chunks.count, chunk_step, ops.zeros((3,), "float32"))
    return sums[0], sums[1], sums[2]


class _Chunks:
    """The flattened target positions, padded to a whole number of chunks of `chunk_tokens`
    (the filler has label 0: padding, out of every sum). A chunk is never longer than the
    positions: a size above them (one chunk for a whole training batch on a GPU, or a replica's
    share of it) would otherwise compute the logits of filler."""

    def __init__(self, hidden, labels, chunk_tokens):
        if chunk_tokens < 1:
            raise ValueError(f"chunk_tokens must be at least 1, got {chunk_tokens}.")
        self.depth = int(ops.shape(hidden)[-1])
        flat_labels = ops.reshape(ops.cast(labels, "int32"), (-1,))
        # A tensor under TensorFlow when the batch shape varies.
        self.tokens = ops.shape(flat_labels)[0]
        if isinstance(self.tokens, int):
            self.chunk_tokens = max(min(chunk_tokens, self.tokens), 1)
        else:
            self.chunk_tokens = ops.maximum(ops.minimum(chunk_tokens, self.tokens), 1)
        self.count = (self.tokens + self.chunk_tokens - 1) // self.chunk_tokens
        self.filler = self.count * self.chunk_tokens - self.tokens
        self.labels = ops.concatenate([flat_labels, ops.zeros((self.filler,), "int32")])

    def padded_hidden(self, hidden):
        """[chunks · chunk_tokens, d]: `hidden` flattened and padded."""
        flat = ops.reshape(hidden, (-1, self.depth))
        return ops.concatenate([flat, ops.zeros((self.filler, self.depth), hidden.dtype)])

    def chunk(self, index, padded_hidden):
        """Chunk `index`'s rows of `padded_hidden` [chunk_tokens, d] and labels [chunk_tokens]."""
        start = index * self.chunk_tokens
        return (ops.slice(padded_hidden, (start, 0), (self.chunk_tokens, self.depth)),
                ops.slice(self.labels, (start,), (self.chunk_tokens,)))


def _chunk_sums(chunk_hidden, chunk_labels, transposed_projection, bias, smoothing):
    """A chunk's [loss, nll, correct] sums, with its float32 logits, their log-normalizer and
    its token mask (what the gradient needs)."""
    mask = token_mask(chunk_labels)
    logits = ops.cast(ops.matmul(chunk_hidden, transposed_projection), "float32")
    if bias is not None:
        logits = logits + bias
    loss, nll, log_normalizer = token_losses(logits, chunk_labels, smoothing)
    predicted = ops.cast(ops.argmax(logits, axis=-1), "int32")
    correct = ops.cast(ops.equal(predicted, chunk_labels), "float32")
    sums = ops.stack([ops.sum(loss * mask), ops.sum(nll * mask), ops.sum(correct * mask)])
    return sums, logits, log_normalizer, mask
