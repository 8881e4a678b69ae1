"""TensorBoard scalars and the console progress line."""

import math
import time

import keras
import tensorflow as tf

# Keras metric names -> the names written to TensorBoard and the console.
_REPORTED_METRICS = ("loss", "accuracy", "neg_log_perplexity")


class ScalarWriter:
    """Writes named scalars at a step into one TensorBoard event directory."""

    def __init__(self, logdir):
        self._writer = tf.summary.create_file_writer(logdir)

    def write(self, scalars, step):
        with self._writer.as_default(step=step):
            for name, value in scalars.items():
                tf.summary.scalar(name, value)
        self._writer.flush()


def reported_scalars(logs):
    """The loss and token metrics from a Keras `logs` dict, as floats."""
    return {name: float(logs[name]) for name in _REPORTED_METRICS if name in logs}


class ProgressLogger(keras.callbacks.Callback):
    """Every `every_steps` steps: prints a progress line and writes train scalars to TensorBoard.

    Scalars are Keras's running means since the current `fit` call began; throughput is
    measured over the last interval from the `target_tokens` metric.
    """

    def __init__(self, writer, total_steps, every_steps=100, print_fn=print):
        super().__init__()
        self.writer = writer
        self.total_steps = total_steps
        self.every_steps = every_steps
        self.print_fn = print_fn

    def on_train_begin(self, logs=None):
        self._mark(0.0)

    def _mark(self, tokens):
        self._last_time = time.monotonic()
        self._last_tokens = tokens
        self._last_step = self._step()

    def _step(self):
        return int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

    def on_train_batch_end(self, batch, logs=None):
        step = self._step()
        if step % self.every_steps and step != self.total_steps:
            return
        logs = logs or {}
        elapsed = max(time.monotonic() - self._last_time, 1e-9)
        tokens = float(logs.get("target_tokens", 0.0))
        scalars = reported_scalars(logs)
        scalars["learning_rate"] = learning_rate_of_update(self.model.optimizer, step)
        scalars["target_tokens_per_second"] = (tokens - self._last_tokens) / elapsed
        scalars["steps_per_second"] = (step - self._last_step) / elapsed
        self.writer.write(scalars, step)
        self.print_fn(f"step {step}/{self.total_steps} | {format_scalars(scalars)}")
        self._mark(tokens)


def learning_rate_of_update(optimizer, step):
    """The rate the optimizer's update number `step` (1-based) used.

    `optimizer.learning_rate` evaluates a schedule at the current iteration count, i.e. gives
    the rate of the next update; logged beside the loss of step s it must be update s's rate.
    """
    schedule = getattr(optimizer, "_learning_rate", None)
    if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        rate = schedule(max(step - 1, 0))
    else:
        rate = optimizer.learning_rate
    return float(keras.ops.convert_to_numpy(rate))


def format_scalars(scalars):
    """'loss 2.1234 | acc 0.5000 | ppl 8.37 | ...' for the scalars present; others (decode
    metrics such as bleu or bracket_f1) follow as 'name value'."""
    parts = []
    formats = {
        "loss": "loss {:.4f}",
        "accuracy": "acc {:.4f}",
        "neg_log_perplexity": "ppl {:.2f}",
        "learning_rate": "lr {:.3g}",
        "target_tokens_per_second": "{:.0f} tok/s",
        "steps_per_second": "{:.2f} steps/s",
    }
    for name, fmt in formats.items():
        if name in scalars:
            value = scalars[name]
            if name == "neg_log_perplexity":
                value = perplexity(value)
            parts.append(fmt.format(value))
    parts += [f"{name} {value:.2f}" for name, value in scalars.items() if name not in formats]
    return " | ".join(parts)


def perplexity(neg_log_perplexity):
    return math.exp(min(-neg_log_perplexity, 50.0))
