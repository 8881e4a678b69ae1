"""Eval loss and token metrics computed by one process alone, over the whole eval set.

Keras's `evaluate` does not run under MultiWorkerMirroredStrategy (it fails converting the
per-replica feature dicts), and sharding the eval set over workers would leave them with
unequal batch counts, so that the last collective would wait forever. Under that strategy each
worker therefore evaluates the whole eval set on its own first device, with no collectives, and
all of them get the same figures; the chief writes them. Training under JAX evaluates with it
too: the batch sums are compiled for the backend in use (`decoding.compiled`).
"""

import itertools

import numpy as np
from keras import ops

from t2t_repro.decoding.compiled import compile_for_backend
from t2t_repro.training.chunked_loss import DEFAULT_CHUNK_TOKENS, chunked_sums
from t2t_repro.training.losses import token_mask


def evaluate_locally(model, batches, smoothing, steps=0, chunk_tokens=DEFAULT_CHUNK_TOKENS):
    """`{"loss", "accuracy", "neg_log_perplexity"}`: means over all non-padding target tokens
    of the `(features, targets)` batches (the first `steps` of them, if `steps`), from logits
    `chunk_tokens` target positions at a time, as training computes its loss."""

    def batch_sums(features, targets):
        hidden, projection, bias = model(features, training=False, project=False)
        loss, nll, correct = chunked_sums(hidden, projection, targets, smoothing, chunk_tokens,
                                          bias)
        return ops.stack([loss, nll, correct, ops.sum(token_mask(targets))])

    compiled_sums = compile_for_backend(batch_sums, model.variables)
    if steps:
        batches = itertools.islice(batches, steps)
    loss, nll, correct, tokens = sum(
        ops.convert_to_numpy(compiled_sums(features, targets)).astype(np.float64)
        for features, targets in batches)
    tokens = max(float(tokens), 1.0)
    return {"loss": loss / tokens, "accuracy": correct / tokens, "neg_log_perplexity": -nll / tokens}
