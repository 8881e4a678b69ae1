"""Evaluation under a single-machine tf.distribute strategy (the default one, or Mirrored over
several devices): each replica takes its share of every eval batch's rows and computes the
same batch sums as `local_evaluation`, a chunk of target positions at a time, so that an
evaluation never holds the vocabulary-wide logits of a whole batch; the sums are added over the
replicas and the batches."""

import tensorflow as tf

from t2t_repro.training.chunked_loss import DEFAULT_CHUNK_TOKENS
from t2t_repro.training.local_evaluation import batch_sums_fn, token_means


class ReplicatedEvaluator:
    """Evaluates `model`, built in `strategy`'s scope, on tf.data batches whose rows are a
    multiple of the strategy's replicas; compiled once, called at every evaluation of a run.
    With `jit_compile`, each replica's sums are compiled with XLA, as the train step's are."""

    def __init__(self, model, strategy, smoothing, chunk_tokens=DEFAULT_CHUNK_TOKENS,
                 jit_compile=False):
        self._strategy = strategy
        function_options = dict(autograph=False, reduce_retracing=True)
        replica_sums = batch_sums_fn(model, smoothing, chunk_tokens)
        if jit_compile:
            replica_sums = tf.function(replica_sums, jit_compile=True, **function_options)

        @tf.function(**function_options)
        def global_sums(features, targets):
            per_replica = strategy.run(replica_sums, args=(features, targets))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        self._global_sums = global_sums
        self._traced = False

    def __call__(self, dataset, steps=0):
        """`token_means` over all non-padding target tokens of `dataset` (its first `steps`
        batches, if `steps`)."""
        if steps:
            dataset = dataset.take(steps)
        batches = self._strategy.experimental_distribute_dataset(dataset)
        if not self._traced:
            # Traced once for the batches' spec, whose lengths are unknown, so that batches of
            # every bucket shape reuse it (as the train step's update does) instead of a
            # second tracing at the second shape.
            self._global_sums.get_concrete_function(*batches.element_spec)
            self._traced = True
        return token_means(self._global_sums(features, targets).numpy()
                           for features, targets in batches)
