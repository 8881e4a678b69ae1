"""TensorBoard scalars and the console progress line.

Event files are written with TensorBoard's own protos and record framing, not `tf.summary`,
so that training under JAX writes the same files without TensorFlow.
"""

import math
import os
import socket
import time

import keras
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

from t2t_repro.training.peak_flops import model_flops_utilization

class EventWriter:
    """Writes `Event` protos into a new event file in `logdir` (created if need be),
    `events.out.tfevents.<time>.<host>.<pid>.<n>.v2`, as TensorFlow names them. TensorBoard
    reads a folder's files in the order of their names, so `n`, the process's count of files
    opened, is zero-padded: its tenth file of a second sorts after its ninth. TensorBoard's
    own `EventFileWriter` would import TensorFlow wherever it is installed."""

    _files_opened = 0

    def __init__(self, logdir):
        os.makedirs(logdir, exist_ok=True)
        EventWriter._files_opened += 1
        name = (f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
                f"{os.getpid()}.{EventWriter._files_opened:06d}.v2")
        self._file = open(os.path.join(logdir, name), "ab")
        self._records = RecordWriter(self._file)
        self.write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))

    def write(self, event):
        """Appends `event` and flushes, so that a reader (or a kill) sees it whole."""
        self._records.write(event.SerializeToString())
        self._file.flush()

    def close(self):
        self._file.close()


class ScalarWriter:
    """Writes named scalars at a step into one TensorBoard event directory.

    A run resumed from its checkpoint at `resumed_step` trains the steps after it again: its
    file opens with a SessionLog START at the step after, by which TensorBoard drops what a
    killed run wrote for those steps (as tensor2tensor's Estimator runs did), so that each
    step is shown once, from the run that went on."""

    def __init__(self, logdir, resumed_step=None):
        self._events = EventWriter(logdir)
        if resumed_step:
            self._events.write(event_pb2.Event(
                wall_time=time.time(), step=resumed_step + 1,
                session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START)))

    def write(self, scalars, step):
        values = [summary_pb2.Summary.Value(tag=name, simple_value=float(value))
                  for name, value in scalars.items()]
        self._events.write(event_pb2.Event(wall_time=time.time(), step=step,
                                           summary=summary_pb2.Summary(value=values)))


class NoWriter:
    """Stands in for a ScalarWriter on a multi-worker run's non-chief workers."""

    def write(self, scalars, step):
        pass


class ProgressReport:
    """Every `every_steps` optimizer updates: prints a progress line and writes train scalars.

    Loss, accuracy and neg_log_perplexity are token means over the updates since the previous
    line, from the training step's sums. Throughput counts real (non-padding) target tokens;
    with `flops_of` (UpdateStats -> model FLOPs of that update) the line also gives model
    TFLOP/s, and with `peak_tflops` (the devices' summed peak) model FLOPs utilisation.
    """

    def __init__(self, writer, total_steps, every_steps=100, print_fn=print, flops_of=None,
                 peak_tflops=None):
        self.writer = writer
        self.total_steps = total_steps
        self.every_steps = every_steps
        self.print_fn = print_fn
        self.flops_of = flops_of
        self.peak_tflops = peak_tflops
        self._start_interval()

    def _start_interval(self):
        self._sums = dict.fromkeys(("loss", "nll", "correct", "tokens", "flops", "updates"), 0.0)
        self._last_time = time.monotonic()

    def add(self, stats, step, learning_rate):
        """Counts one update's `UpdateStats`; `step` is the optimizer's step after it, and
        `learning_rate` the rate it used. Reports when `step` is due."""
        sums = self._sums
        sums["loss"] += stats.loss_sum
        sums["nll"] += stats.nll_sum
        sums["correct"] += stats.correct
        sums["tokens"] += stats.target_tokens
        sums["updates"] += 1
        if self.flops_of is not None:
            sums["flops"] += self.flops_of(stats)
        if step % self.every_steps and step != self.total_steps:
            return
        elapsed = max(time.monotonic() - self._last_time, 1e-9)
        tokens = max(sums["tokens"], 1.0)
        scalars = {
            "loss": sums["loss"] / tokens,
            "accuracy": sums["correct"] / tokens,
            "neg_log_perplexity": -sums["nll"] / tokens,
            "learning_rate": learning_rate,
            "target_tokens_per_second": sums["tokens"] / elapsed,
            "steps_per_second": sums["updates"] / elapsed,
        }
        if self.flops_of is not None:
            scalars["model_tflops_per_second"] = sums["flops"] / elapsed / 1e12
            if self.peak_tflops:
                scalars["model_flops_utilization"] = model_flops_utilization(
                    sums["flops"] / elapsed, self.peak_tflops)
        self.writer.write(scalars, step)
        self.print_fn(f"step {step}/{self.total_steps} | {format_scalars(scalars)}")
        self._start_interval()


def learning_rate_of_update(optimizer, step):
    """The rate the optimizer's update number `step` (1-based) used.

    `optimizer.learning_rate` evaluates a schedule at the current iteration count, i.e. gives
    the rate of the next update; logged beside the loss of step s it must be update s's rate.
    """
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)  # under loss scaling
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
        "model_tflops_per_second": "{:.3g} TFLOP/s",
        "model_flops_utilization": "MFU {:.1%}",
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
