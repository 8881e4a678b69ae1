"""Eval loss and token metrics computed by one worker alone, over the whole eval set.

Keras's `evaluate` does not run under MultiWorkerMirroredStrategy (it fails converting the
per-replica feature dicts), and sharding the eval set over workers would leave them with
unequal batch counts, so that the last collective would wait forever. Under that strategy each
worker therefore evaluates the whole eval set on its own first device, with no collectives, and
all of them get the same figures; the chief writes them.
"""

import tensorflow as tf

from t2t_repro.training.losses import smoothed_loss_and_nll
from t2t_repro.training.train_step import token_sums


def evaluate_locally(model, dataset, smoothing, steps=0):
    """`{"loss", "accuracy", "neg_log_perplexity"}`: means over all non-padding target tokens
    of `dataset`'s `(features, targets)` batches (its first `steps` batches, if `steps`)."""

    @tf.function(reduce_retracing=True)
    def batch_sums(features, targets):
        logits = model(features, training=False)
        losses, nll = smoothed_loss_and_nll(targets, logits, smoothing)
        return tf.stack(token_sums(targets, logits, losses, nll))

    if steps:
        dataset = dataset.take(steps)
    loss, nll, correct, tokens = sum(
        batch_sums(features, targets).numpy() for features, targets in dataset)
    tokens = max(float(tokens), 1.0)
    return {"loss": loss / tokens, "accuracy": correct / tokens, "neg_log_perplexity": -nll / tokens}
