"""One optimizer update under JAX: the loss, accumulation, clipping, float16 loss scaling and
finite check of the TensorFlow `TensorFlowTrainStep`, as jitted pure functions of the model's
variables.

The loss of an update is the mean label-smoothed cross-entropy over all non-padding target
tokens of its global batch (all micro-batches, all devices). The token count comes from the
host's NumPy batches before the step; inside the jitted step the batch is one array (sharded
over devices under `keras.distribution.DataParallel`), so sums over it are already global and
XLA inserts the gradient all-reduce.

State lives in the Keras variables between calls: each call runs the jitted update on their
values and assigns the results back, so checkpoints, evaluation and decoding see the trained
weights. On an accelerator a call also starts the next update before it waits for its own
(`lookahead`), so that the device does not idle while the host fetches the update's figures,
assigns the variables and reads the next batch: on an H200 that made transformer_base's step
1.12x and transformer_big's 1.06x as fast (docs/jax_and_gpus.md). The update started ahead is
used only if the next call brings the same iterator and finds the variables as this call left
them; otherwise it is dropped and the update runs again from the variables. An update started
ahead reads weights the variables still hold, so nothing of them is donated and they exist twice;
on CPUs, where that made a 4-row transformer_base step 0.71x as fast (a Zen 4), there is no
lookahead, and the variables' buffers are donated to the update.
"""

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import keras
import numpy as np

from t2t_repro.training.jax.compiler_options import train_step_jit_options
from t2t_repro.training.chunked_loss import DEFAULT_CHUNK_TOKENS, chunked_loss_sums
from t2t_repro.training.update_stats import UpdateStats, batch_stats


def lookahead_pays(devices=None):
    """Whether a call should start the next update before waiting for its own: on accelerators,
    not on CPUs (module docstring)."""
    return any(device.platform != "cpu" for device in devices or jax.devices())


class _Started(NamedTuple):
    """An update handed to the devices: its micro-batches (to run it again from other weights)
    and its `results`, not yet waited for; or, when `results` is None, the `error` the iterator
    raised while the micro-batches were pulled ahead."""
    iterator: object
    micro_batches: list
    results: Optional[tuple]
    error: Optional[Exception] = None


class JaxTrainStep:
    """Takes one optimizer update per call, pulling `accumulation_steps` micro-batches
    `(features, targets)` of NumPy arrays from an iterator.

    Args:
        model: a compiled, built Keras model (its optimizer built too), whose call takes
            `project=False` (`Transformer.call`): the loss projects its hidden states a chunk
            at a time. `model.optimizer` may be a `keras.optimizers.LossScaleOptimizer`
            (float16 training): the loss is scaled by its dynamic scale, and an update whose
            gradients overflow is skipped by it (the step counter does not advance) while the
            scale halves, as `TensorFlowTrainStep` does.
        smoothing: label smoothing ε of the loss.
        accumulation_steps: micro-batches per update (k ≥ 1); their gradients are summed
            before the one update, so k batches equal one batch of their union.
        clip_norm: clip the update's gradient to this global norm (0: no clipping); under loss
            scaling, the norm of the unscaled gradient.
        place_batch: puts a batch's arrays on the devices (e.g. sharded over them); default:
            left to JAX.
        loss_chunk_tokens: target positions per chunk of the loss (`chunked_loss`).
        lookahead: start the next update before waiting for this one (module docstring);
            None: where `lookahead_pays`.

    Returns (from a call): `UpdateStats` of the update. `finite` is False when the loss or,
    without loss scaling, a gradient was not finite: the update has then been applied with
    non-finite values, and the caller must stop without saving the weights.
    """

    def __init__(self, model, smoothing, accumulation_steps=1, clip_norm=0.0,
                 place_batch=None, loss_chunk_tokens=DEFAULT_CHUNK_TOKENS, lookahead=None):
        if accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be at least 1, got {accumulation_steps}.")
        self.model = model
        self.smoothing = smoothing
        self.accumulation_steps = accumulation_steps
        self.clip_norm = clip_norm
        self.loss_chunk_tokens = loss_chunk_tokens
        self.place_batch = place_batch or (lambda batch: batch)
        self.lookahead = lookahead_pays() if lookahead is None else lookahead
        optimizer = model.optimizer
        self.loss_scaling = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        self._scale_index = None
        if self.loss_scaling:
            self._scale_index = next(index for index, variable in enumerate(optimizer.variables)
                                     if variable is optimizer.dynamic_scale)
        self._variables = (model.trainable_variables, model.non_trainable_variables,
                           model.optimizer.variables)
        self._all_variables = [variable for variables in self._variables
                               for variable in variables]
        self._started = None  # the update started ahead, for the next call
        self._assigned = None  # the variables' values as the last call left them
        self._gradients = jax.value_and_grad(self._loss, has_aux=True)
        # Started ahead, an update reads state the variables still hold: only the gradient
        # sum is donated.
        self._accumulate = jax.jit(self._accumulate_micro_batch,
                                   donate_argnums=(2,) if self.lookahead else (1, 2),
                                   **train_step_jit_options())
        self._update = jax.jit(self._apply_update,
                               donate_argnums=(3,) if self.lookahead else (0, 1, 2),
                               **train_step_jit_options())

    def __call__(self, iterator):
        started, self._started = self._started, None
        if started is None or started.iterator is not iterator:
            started = _Started(iterator, [], None)
        if started.error is not None:
            raise started.error
        if started.results is None or not self._variables_as_left():
            started = self._start(self._state(), started.micro_batches or self._pull(iterator),
                                  iterator)
        *state, sums, finite = started.results
        if self.lookahead:
            self._started = self._start_ahead(state, iterator)
        sums, finite = jax.device_get((sums, finite))
        for variables, values in zip(self._variables, state):
            for variable, value in zip(variables, values):
                variable.assign(value)
        if self.lookahead:
            self._assigned = [variable.value for variable in self._all_variables]
        return UpdateStats.from_sums(np.sum(sums, axis=0), finite)

    def _pull(self, iterator):
        """One update's micro-batches from `iterator`."""
        return [next(iterator) for _ in range(self.accumulation_steps)]

    def _start_ahead(self, state, iterator):
        """The next update started from `state`; if pulling its micro-batches raises (the
        iterator ended, or its data failed), the error, for the next call to raise, as it
        would have without lookahead."""
        try:
            micro_batches = self._pull(iterator)
        except Exception as error:  # raised again by the next call
            return _Started(iterator, [], None, error)
        return self._start(state, micro_batches, iterator)

    def _state(self):
        return [[variable.value for variable in variables] for variables in self._variables]

    def _variables_as_left(self):
        """Whether no one has assigned a variable since the last call."""
        return all(variable.value is value
                   for variable, value in zip(self._all_variables, self._assigned))

    def _start(self, state, micro_batches, iterator):
        """`_Started` with the update's device results `(trainable, non_trainable,
        optimizer_state, per-micro-batch sums, finite)`, not waited for."""
        global_tokens = np.float32(sum(np.count_nonzero(targets)
                                       for _, targets in micro_batches))
        trainable, non_trainable, optimizer_state = state
        loss_scale = self._loss_scale(optimizer_state)
        gradient_sum, sums = None, []
        for batch in micro_batches[:-1]:
            gradient_sum, non_trainable, stats = self._accumulate(
                trainable, non_trainable, gradient_sum, self.place_batch(batch), global_tokens,
                loss_scale)
            sums.append(stats)
        trainable, non_trainable, optimizer_state, stats, finite = self._update(
            trainable, non_trainable, optimizer_state, gradient_sum,
            self.place_batch(micro_batches[-1]), global_tokens)
        sums.append(stats)
        return _Started(iterator, micro_batches,
                        (trainable, non_trainable, optimizer_state, sums, finite))

    def _loss_scale(self, optimizer_state):
        """The loss scale in `optimizer_state` (a device scalar), or None without scaling."""
        return optimizer_state[self._scale_index] if self.loss_scaling else None

    def _loss(self, trainable, non_trainable, batch, global_tokens, loss_scale):
        features, targets = batch
        (hidden, projection, bias), non_trainable = self.model.stateless_call(
            trainable, non_trainable, features, training=True, project=False)
        loss_sum, nll_sum, correct = chunked_loss_sums(
            hidden, projection, targets, self.smoothing, self.loss_chunk_tokens, bias)
        loss = loss_sum / jnp.maximum(global_tokens, 1.0)
        if loss_scale is not None:
            loss = loss * loss_scale
        return loss, (non_trainable, batch_stats(features, targets, loss_sum, nll_sum, correct))

    def _accumulate_micro_batch(self, trainable, non_trainable, gradient_sum, batch,
                                global_tokens, loss_scale):
        (_, (non_trainable, stats)), gradients = self._gradients(
            trainable, non_trainable, batch, global_tokens, loss_scale)
        return _add(gradient_sum, gradients), non_trainable, stats

    def _apply_update(self, trainable, non_trainable, optimizer_state, gradient_sum, batch,
                      global_tokens):
        loss_scale = self._loss_scale(optimizer_state)
        (_, (non_trainable, stats)), gradients = self._gradients(
            trainable, non_trainable, batch, global_tokens, loss_scale)
        gradients = _add(gradient_sum, gradients)
        if self.clip_norm:
            # Scaled gradients: the loss scale times the true ones (the optimizer divides it
            # out), so the norm is scaled too.
            gradients = _clip_by_global_norm(
                gradients, self.clip_norm * (1.0 if loss_scale is None else loss_scale))
        finite = jnp.isfinite(stats[0])
        if not self.loss_scaling:  # with loss scaling, overflowing gradients skip the step
            finite = jnp.logical_and(finite, jnp.all(jnp.asarray(
                [jnp.all(jnp.isfinite(g)) for g in gradients])))
        trainable, optimizer_state = self.model.optimizer.stateless_apply(
            optimizer_state, gradients, trainable)
        return trainable, non_trainable, optimizer_state, stats, finite


def _add(gradient_sum, gradients):
    if gradient_sum is None:
        return gradients
    return [total + g for total, g in zip(gradient_sum, gradients)]


def _clip_by_global_norm(gradients, clip_norm):
    """The gradients scaled by clip_norm / max(global norm, clip_norm), as
    `tf.clip_by_global_norm`."""
    norm = jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in gradients))
    return [g * (clip_norm / jnp.maximum(norm, clip_norm)) for g in gradients]
