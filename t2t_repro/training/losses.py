"""Label-smoothed cross-entropy over non-padding target tokens, and token-level metrics."""

import keras
from keras import ops

from t2t_repro.special_ids import PAD_ID


def _log_probs_and_nll(labels, logits):
    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    labels = ops.cast(labels, "int32")
    nll = -ops.squeeze(ops.take_along_axis(log_probs, ops.expand_dims(labels, -1), axis=-1), -1)
    return log_probs, nll


def label_smoothed_cross_entropy(labels, logits, smoothing):
    """Per-token cross-entropy against the smoothed target distribution.

    The target puts 1 - ε on the true token and ε / (V - 1) on each of the other V - 1 tokens
    (paper §5.4, as tensor2tensor smooths), so -Σ q·log p = (1 - ε)·nll + ε/(V-1)·Σ_{v≠y} -log p_v.

    Args:
        labels: int ids [batch, length]. logits: [batch, length, V]. smoothing: ε.

    Returns:
        [batch, length] losses (padding positions included; weight them out with `token_mask`).
    """
    log_probs, nll = _log_probs_and_nll(labels, logits)
    if not smoothing:
        return nll
    vocab_size = ops.shape(logits)[-1]
    other_tokens_nll = -ops.sum(log_probs, axis=-1) - nll
    return (1.0 - smoothing) * nll + smoothing / (vocab_size - 1) * other_tokens_nll


def token_mask(labels):
    """1.0 at real target tokens, 0.0 at padding."""
    return ops.cast(ops.not_equal(ops.cast(labels, "int32"), PAD_ID), "float32")


def masked_mean(values, mask):
    return ops.sum(values * mask) / ops.maximum(ops.sum(mask), 1.0)


def replica_share(loss):
    """This replica's part of a loss averaged over the replicas of a tf.distribute strategy.

    Keras sums gradients across replicas and divides the losses it reduces itself by the
    number of replicas; a loss that arrives already reduced to a scalar must be divided here,
    or N replicas would take N-times too large a step and report N times the loss.
    """
    if keras.backend.backend() != "tensorflow":
        return loss
    import tensorflow as tf

    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    return loss / replicas if replicas > 1 else loss


@keras.saving.register_keras_serializable(package="t2t_repro")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """Mean label-smoothed cross-entropy per non-padding target token (per replica, under a
    tf.distribute strategy: replicas then weigh equally, as in tensor2tensor)."""

    def __init__(self, smoothing=0.1, name="label_smoothed_cross_entropy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.smoothing = smoothing

    def call(self, y_true, y_pred):
        losses = label_smoothed_cross_entropy(y_true, y_pred, self.smoothing)
        return replica_share(masked_mean(losses, token_mask(y_true)))

    def get_config(self):
        return {**super().get_config(), "smoothing": self.smoothing}


class _TokenMean(keras.metrics.Metric):
    """Mean of a per-token value over non-padding target tokens, accumulated across batches."""

    def __init__(self, name, **kwargs):
        super().__init__(name=name, **kwargs)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def per_token(self, y_true, y_pred):
        raise NotImplementedError

    def update_state(self, y_true, y_pred, sample_weight=None):
        mask = token_mask(y_true)
        self.total.assign_add(ops.sum(self.per_token(y_true, y_pred) * mask))
        self.count.assign_add(ops.sum(mask))

    def result(self):
        return ops.divide_no_nan(self.total, self.count)  # 0 before any token is seen

    def reset_state(self):
        self.total.assign(0.0)
        self.count.assign(0.0)


class TokenAccuracy(_TokenMean):
    """Fraction of non-padding target tokens whose argmax prediction is right."""

    def __init__(self, name="accuracy", **kwargs):
        super().__init__(name=name, **kwargs)

    def per_token(self, y_true, y_pred):
        predicted = ops.argmax(y_pred, axis=-1)
        return ops.cast(ops.equal(predicted, ops.cast(y_true, predicted.dtype)), "float32")


class NegLogPerplexity(_TokenMean):
    """Mean log-probability of the true token (no smoothing); perplexity = exp(-this)."""

    def __init__(self, name="neg_log_perplexity", **kwargs):
        super().__init__(name=name, **kwargs)

    def per_token(self, y_true, y_pred):
        return -_log_probs_and_nll(y_true, y_pred)[1]


class TargetTokens(keras.metrics.Metric):
    """Number of non-padding target tokens seen, for throughput figures."""

    def __init__(self, name="target_tokens", **kwargs):
        super().__init__(name=name, **kwargs)
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.count.assign_add(ops.sum(token_mask(y_true)))

    def result(self):
        return ops.cast(self.count, self.dtype)

    def reset_state(self):
        self.count.assign(0.0)


def training_metrics():
    return [TokenAccuracy(), NegLogPerplexity(), TargetTokens()]
