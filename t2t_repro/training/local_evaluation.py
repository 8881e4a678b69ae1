"""Eval loss and token metrics over the whole eval set, computed by this process alone.

`batch_sums_fn` gives the loss sums of one batch, which every evaluation adds up: here on
one process's devices, under TensorFlow's single-machine strategies over the replicas
(`tensorflow.evaluation`). Training under JAX evaluates here (`decoding.compiled` compiles the
sums for the backend in use), and so does each worker of a MultiWorkerMirroredStrategy run, on
its first device with no collectives: sharding the eval set over workers would leave them with
unequal batch counts, so that the last collective would wait forever. All workers get the same
figures; the chief writes them.
"""

import itertools

import numpy as np
from keras import ops

from t2t_repro.decoding.compiled import compile_for_backend
from t2t_repro.errors import UserError
from t2t_repro.training.chunked_loss import DEFAULT_CHUNK_TOKENS, chunked_sums
from t2t_repro.training.losses import token_mask


def batch_sums_fn(model, smoothing, chunk_tokens=DEFAULT_CHUNK_TOKENS):
    """A function of `(features, targets)` giving the batch's [loss, nll, correct, tokens]
    sums over its non-padding target tokens, from logits `chunk_tokens` target positions at a
    time, as training computes its loss."""

    def batch_sums(features, targets):
        hidden, projection, bias = model(features, training=False, project=False)
        loss, nll, correct = chunked_sums(hidden, projection, targets, smoothing, chunk_tokens,
                                          bias)
        return ops.stack([loss, nll, correct, ops.sum(token_mask(targets))])

    return batch_sums


class EmptyEvaluationError(UserError):
    """The eval set gave no target tokens to evaluate."""


def token_means(batch_sums):
    """`{"loss", "accuracy", "neg_log_perplexity"}` over the tokens of every batch's
    [loss, nll, correct, tokens] sums, added in float64."""
    loss, nll, correct, tokens = sum((np.asarray(sums, np.float64) for sums in batch_sums),
                                     np.zeros(4))
    if not tokens:
        raise EmptyEvaluationError(
            "the evaluation found no target tokens: the eval set is empty, or every eval "
            "example is longer than max_length. Check the eval data, or raise "
            "--hparams=max_length=N.")
    return {"loss": loss / tokens, "accuracy": correct / tokens,
            "neg_log_perplexity": -nll / tokens}


class LocalEvaluator:
    """Evaluates `model` on `(features, targets)` batches; compiled once, called at every
    evaluation of a run."""

    def __init__(self, model, smoothing, chunk_tokens=DEFAULT_CHUNK_TOKENS):
        self._batch_sums = compile_for_backend(batch_sums_fn(model, smoothing, chunk_tokens),
                                               model.variables)

    def __call__(self, batches, steps=0):
        """`token_means` over all non-padding target tokens of `batches` (the first `steps`
        of them, if `steps`)."""
        if steps:
            batches = itertools.islice(batches, steps)
        return token_means(ops.convert_to_numpy(self._batch_sums(features, targets))
                           for features, targets in batches)
