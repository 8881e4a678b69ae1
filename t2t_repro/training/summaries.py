"""TensorBoard scalars and the console progress line."""

import math
import time

import keras
import tensorflow as tf

from t2t_repro.training.losses import TokenMean

# The names written to TensorBoard and the console -> the token-mean metrics that give them.
_REPORTED_METRICS = {
    "loss": "token_mean_loss",
    "accuracy": "accuracy",
    "neg_log_perplexity": "neg_log_perplexity",
}


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
    """The loss and token metrics from a Keras `logs` dict, as floats: means over all the
    non-padding target tokens the metrics saw."""
    return {name: float(logs[metric]) for name, metric in _REPORTED_METRICS.items()
            if metric in logs}


def _token_means(model):
    """`{metric name: TokenMean}` of the reported metrics `model` was compiled with."""
    found = {}
    pending = list(model.metrics)
    while pending:
        metric = pending.pop()
        if isinstance(metric, TokenMean):
            found[metric.name] = metric
        pending += getattr(metric, "metrics", [])
    return {name: found[metric] for name, metric in _REPORTED_METRICS.items() if metric in found}


def _sums(metrics):
    """`{name: (total, count)}` of token-mean metrics, as floats."""
    return {name: (float(keras.ops.convert_to_numpy(metric.total)),
                   float(keras.ops.convert_to_numpy(metric.count)))
            for name, metric in metrics.items()}


class ProgressLogger(keras.callbacks.Callback):
    """Every `every_steps` steps: prints a progress line and writes train scalars to TensorBoard.

    Loss, accuracy and neg_log_perplexity are token means over the steps since the previous
    progress line: the token metrics' running sums, differenced between the two lines (Keras
    resets them when each `fit` call starts, so a finished call's part is carried over).
    Throughput is measured over the last interval from the `target_tokens` metric.
    """

    def __init__(self, writer, total_steps, every_steps=100, print_fn=print):
        super().__init__()
        self.writer = writer
        self.total_steps = total_steps
        self.every_steps = every_steps
        self.print_fn = print_fn
        self._metrics = {}  # found once Keras has built the compiled metrics
        self._carried = {}  # sums from finished `fit` calls since the last line

    def on_train_begin(self, logs=None):
        # Each `fit` call resets the metrics (just after this callback runs).
        self._at_mark = {}
        self._start_interval(0.0)

    def on_train_end(self, logs=None):
        self._carried = self._interval_sums()

    def _interval_sums(self):
        """`{name: (total, count)}` since the last line, finished `fit` calls included."""
        if not self._metrics:  # Keras may build them only with the first step
            self._metrics = _token_means(self.model)
        sums = {}
        for name, (total, count) in _sums(self._metrics).items():
            carried_total, carried_count = self._carried.get(name, (0.0, 0.0))
            mark_total, mark_count = self._at_mark.get(name, (0.0, 0.0))
            sums[name] = (carried_total + total - mark_total, carried_count + count - mark_count)
        return sums

    def _start_interval(self, tokens):
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
        scalars = {name: total / max(count, 1.0)
                   for name, (total, count) in self._interval_sums().items()}
        scalars["learning_rate"] = learning_rate_of_update(self.model.optimizer, step)
        scalars["target_tokens_per_second"] = (tokens - self._last_tokens) / elapsed
        scalars["steps_per_second"] = (step - self._last_step) / elapsed
        self.writer.write(scalars, step)
        self.print_fn(f"step {step}/{self.total_steps} | {format_scalars(scalars)}")
        self._start_interval(tokens)
        self._at_mark = _sums(self._metrics)
        self._carried = {}


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
