"""One optimizer update from k micro-batches on every replica, with one loss definition.

The loss of an update is the mean label-smoothed cross-entropy over all non-padding target
tokens of its global batch: every micro-batch on every replica (tensor2tensor's GPU path). So
the update does not depend on how the batch is split: over replicas holding unequal token
counts (or only filler rows), over micro-batches, or both. Each update first counts the global
batch's target tokens (a scalar all-reduce); each replica then differentiates the sum of its
tokens' losses divided by that count, and the optimizer sums the replicas' gradients.

With `accumulation_steps` = k > 1, the gradients of the first k - 1 micro-batches are added
into per-replica (sync-on-read) variables and the k-th applies the update, so a step on a
k-times-smaller batch equals one step on their union. Nothing is ever checkpointed between
micro-batches: the trainer only saves after `TensorFlowTrainStep.__call__` returns.

TensorFlow only (tf.distribute); the model code it calls is backend-agnostic.
"""

import keras
import numpy as np
import tensorflow as tf

from t2t_repro.training.chunked_loss import DEFAULT_CHUNK_TOKENS, chunked_loss_sums
from t2t_repro.training.losses import token_mask
from t2t_repro.training.update_stats import STAT_FIELDS, UpdateStats, batch_stats


def _all_finite(tensors):
    return tf.reduce_all([tf.reduce_all(tf.math.is_finite(t)) for t in tensors])


class TensorFlowTrainStep:
    """Takes one optimizer update per call, pulling `accumulation_steps` micro-batches from a
    distributed iterator of `(features, targets)` per-replica batches.

    Args:
        model: a compiled, built Keras model (its optimizer built too) created in
            `strategy.scope()`, whose call takes `project=False` (`Transformer.call`): the loss
            projects its hidden states a chunk at a time. `model.optimizer` may be a
            `keras.optimizers.LossScaleOptimizer` (float16 training): the loss is scaled, and a
            step whose gradients overflow is skipped by it (the step counter does not advance)
            while the scale halves.
        strategy: the tf.distribute strategy the model was built under.
        smoothing: label smoothing ε of the loss.
        accumulation_steps: micro-batches per update (k ≥ 1).
        clip_norm: clip the global batch's gradient to this global norm (0: no clipping). The
            norm is taken after summing over replicas, so it is the global batch's norm, and
            of the unscaled gradient under loss scaling.
        jit_compile: compile each replica's work with XLA.
        loss_chunk_tokens: target positions per chunk of the loss (`chunked_loss`).

    Returns (from a call): `UpdateStats` of the update. `finite` is False when the loss or, for
    optimizers without loss scaling, a gradient was not finite: the update has then been
    applied with non-finite values, and the caller must stop without saving the weights.
    """

    def __init__(self, model, strategy, smoothing, accumulation_steps=1, clip_norm=0.0,
                 jit_compile=False, loss_chunk_tokens=DEFAULT_CHUNK_TOKENS):
        if accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be at least 1, got {accumulation_steps}.")
        self.model = model
        self.strategy = strategy
        self.smoothing = smoothing
        self.accumulation_steps = accumulation_steps
        self.clip_norm = clip_norm
        self.loss_chunk_tokens = loss_chunk_tokens
        self.loss_scaling = isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
        replicas = strategy.num_replicas_in_sync
        # Keras's optimizer sums the replicas' gradients itself; clipping and the loss scale's
        # overflow check need the sum first, so there the step sums them and hands each replica
        # a 1/N share of it.
        self._sum_before_apply = replicas > 1 and bool(clip_norm or self.loss_scaling)
        self._variables = model.trainable_variables
        with strategy.scope():
            self._gradient_sums = [
                tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False,
                            synchronization=tf.VariableSynchronization.ON_READ,
                            aggregation=tf.VariableAggregation.SUM)
                for v in self._variables
            ] if accumulation_steps > 1 else []
        # Nothing here branches on a tensor's value, so autograph has nothing to convert; left
        # on, it rewrites this code and Keras's optimizer in every new process, seconds of the
        # first step's tracing.
        function_options = dict(reduce_retracing=True, autograph=False)
        replica_options = dict(function_options, jit_compile=jit_compile)
        # With accumulation, the forward and backward pass is traced once and called by both
        # replica functions, so that the model is not traced twice; a single micro-batch's
        # update inlines it (a nested function costs it seconds of graph optimisation).
        self._replica_gradients = (tf.function(self._micro_batch, **replica_options)
                                   if accumulation_steps > 1 else self._micro_batch)
        self._replica_accumulate = tf.function(self._accumulate_on_replica, **replica_options)
        self._replica_apply = tf.function(self._apply_on_replica, **replica_options)
        self._count = tf.function(self._count_global_tokens, **function_options)
        self._accumulate = tf.function(self._distributed_accumulate, **function_options)
        self._apply = tf.function(self._distributed_apply, **function_options)
        # A batch spec with unknown lengths traces the update once for every bucket shape.
        self._trace_ahead = True

    def __call__(self, iterator):
        micro_batches = [next(iterator) for _ in range(self.accumulation_steps)]
        if self._trace_ahead and hasattr(iterator, "element_spec"):  # a tf.data iterator
            self._trace_for_every_batch_shape(iterator.element_spec)
        global_tokens = self._count(micro_batches)
        sums = np.zeros(STAT_FIELDS)
        for batch in micro_batches[:-1]:
            sums += self._accumulate(batch, global_tokens).numpy()
        stats, finite = self._apply(micro_batches[-1], global_tokens)
        sums += stats.numpy()
        return UpdateStats.from_sums(sums, finite.numpy())

    def _trace_for_every_batch_shape(self, batch_spec):
        """Traces the update once for the iterator's batch spec (per replica under a
        distribution strategy), whose lengths and row counts are unknown (None), so that
        batches of other bucket shapes reuse it instead of tracing it again for the first new
        shape."""
        tokens_spec = tf.TensorSpec([], tf.float32)
        self._count.get_concrete_function([batch_spec] * self.accumulation_steps)
        self._apply.get_concrete_function(batch_spec, tokens_spec)
        if self.accumulation_steps > 1:
            self._accumulate.get_concrete_function(batch_spec, tokens_spec)
        self._trace_ahead = False

    def _count_global_tokens(self, micro_batches):
        def local_count(*batches):
            return tf.add_n([tf.reduce_sum(token_mask(targets)) for _, targets in batches])

        per_replica = self.strategy.run(local_count, args=tuple(micro_batches))
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    def _micro_batch(self, features, targets, global_tokens):
        """Gradients of this replica's share of the update's loss, and its token sums."""
        with tf.GradientTape() as tape:
            hidden, projection, bias = self.model(features, training=True, project=False)
            loss_sum, nll_sum, correct = chunked_loss_sums(
                hidden, projection, targets, self.smoothing, self.loss_chunk_tokens, bias)
            loss = loss_sum / tf.maximum(global_tokens, 1.0)
            if self.loss_scaling:
                loss = self.model.optimizer.scale_loss(loss)
        gradients = tape.gradient(loss, self._variables)
        return gradients, batch_stats(features, targets, loss_sum, nll_sum, correct)

    def _accumulate_on_replica(self, batch, global_tokens):
        gradients, stats = self._replica_gradients(*batch, global_tokens)
        for total, gradient in zip(self._gradient_sums, gradients):
            total.assign_add(tf.cast(gradient, tf.float32))
        return stats

    def _apply_on_replica(self, batch, global_tokens):
        gradients, stats = self._replica_gradients(*batch, global_tokens)
        if self._gradient_sums:
            gradients = [g + total for g, total in zip(gradients, self._gradient_sums)]
            for total in self._gradient_sums:
                total.assign(tf.zeros_like(total))
        context = tf.distribute.get_replica_context()
        if self._sum_before_apply:
            gradients = context.all_reduce(tf.distribute.ReduceOp.SUM, gradients)
        if self.clip_norm:
            gradients, _ = tf.clip_by_global_norm(gradients, self._scaled_clip_norm())
        finite = tf.math.is_finite(stats[0])
        if not self.loss_scaling:  # with loss scaling, overflowing gradients skip the step
            finite = tf.logical_and(finite, _all_finite(gradients))
        if self._sum_before_apply:
            gradients = [g / self.strategy.num_replicas_in_sync for g in gradients]
        self.model.optimizer.apply(gradients, self._variables)
        return stats, tf.cast(tf.logical_not(finite), tf.float32)

    def _scaled_clip_norm(self):
        """The clip norm for the gradients as computed: under loss scaling they are the loss
        scale times the true ones (the optimizer divides it out), so the norm is scaled too."""
        if not self.loss_scaling:
            return self.clip_norm
        return self.clip_norm * tf.cast(self.model.optimizer.dynamic_scale, tf.float32)

    def _distributed_accumulate(self, batch, global_tokens):
        stats = self.strategy.run(self._replica_accumulate, args=(batch, global_tokens))
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, stats, axis=None)

    def _distributed_apply(self, batch, global_tokens):
        stats, non_finite = self.strategy.run(self._replica_apply, args=(batch, global_tokens))
        sum_over_replicas = tf.distribute.ReduceOp.SUM
        return (self.strategy.reduce(sum_over_replicas, stats, axis=None),
                tf.equal(self.strategy.reduce(sum_over_replicas, non_finite, axis=None), 0.0))
