"""The best checkpoint by an eval metric, and early stopping (tensor2tensor's
`--eval_early_stopping_*` flags), for every backend: `TrainingRunBase` calls `BestCheckpoint`
after each evaluation, so TensorFlow and JAX runs decide alike.

The best checkpoint is `<output_dir>/best/ckpt-<step>.weights.h5` beside `best.json` (step,
metric, value, direction and the decodes file it came from); `--keep_checkpoint_max` never
prunes it, and a resumed run continues its record.
"""

import dataclasses
import json
import os

from t2t_repro.errors import ConfigurationError
from t2t_repro.names import BEST_RECORD_FILENAME, BEST_SUBDIR
from t2t_repro.training import checkpoints
from t2t_repro.utils.atomic_files import atomic_path, write_text_atomically

# The eval metrics every evaluation reports, without decoding; the rest need beam search.
TEACHER_FORCED_METRICS = ("loss", "accuracy", "neg_log_perplexity")
_MINIMIZED_METRICS = ("loss",)


def is_improvement(value, best, minimize=False, delta=0.0):
    """Whether `value` beats `best` (None: no best yet): strictly better by at least `delta`.
    A tie is never an improvement, so the earliest of equal values stays the best."""
    if best is None:
        return True
    gain = best - value if minimize else value - best
    return gain > 0 and gain >= delta


def should_stop(step, best_step, patience):
    """Whether training ends at `step`: `patience` steps or more (0: never) since the best."""
    return patience > 0 and step - best_step >= patience


@dataclasses.dataclass(frozen=True)
class Criterion:
    """What ranks checkpoints: an eval metric, its direction, the smallest gain that counts,
    and the steps without one that end training (0: never)."""

    metric: str
    minimize: bool
    delta: float = 0.0
    patience: int = 0


def choose_criterion(problem, decoding, metric=None, minimize=None, delta=0.0, patience=0):
    """`(Criterion, note)`. The default metric is the problem's main decode metric; without
    decoding (`decoding` false) it falls back to `loss` with a `note` saying so, unless early
    stopping was asked for: then, as for a decode metric named explicitly, it is an error. So
    is a metric the evaluation will not report, where the problem declares its decode metrics
    (`declared_decode_metrics`): before training, not at the first evaluation."""
    note = None
    if metric is None and decoding:
        metric = problem.main_decode_metric
    elif metric is None and not patience:
        metric = "loss"
        note = (f"The best checkpoint is ranked by eval loss: {problem.main_decode_metric} "
                f"needs --eval_decode_examples > 0.")
    elif metric not in TEACHER_FORCED_METRICS and not decoding:
        raise ConfigurationError(
            f"ranking checkpoints by {metric or problem.main_decode_metric} needs "
            f"--eval_decode_examples > 0; set it, or --eval_early_stopping_metric to one of "
            f"{', '.join(TEACHER_FORCED_METRICS)}.")
    decoded = declared_decode_metrics(problem)
    if metric not in TEACHER_FORCED_METRICS and decoded is not None and metric not in decoded:
        raise unreported_metric_error(metric, TEACHER_FORCED_METRICS + decoded)
    if minimize is None:
        minimize = metric in _MINIMIZED_METRICS
    return Criterion(metric, minimize, delta, patience), note


def declared_decode_metrics(problem):
    """The names the problem's `decode_metrics` reports, from the `decode_metric_names` the
    same class defines; None where a subclass overrides `decode_metrics` alone (a user's
    problem, say): its names are known only once it evaluates."""
    def owner(method):
        return next(cls for cls in type(problem).__mro__ if method in vars(cls))

    if owner("decode_metrics") is not owner("decode_metric_names"):
        return None
    return tuple(problem.decode_metric_names())


def unreported_metric_error(metric, reported):
    """The error for ranking by a `metric` that is not among the evaluation's `reported`."""
    return ConfigurationError(
        f"the evaluation reports no {metric} to rank checkpoints by "
        f"(--eval_early_stopping_metric); it reports {', '.join(sorted(reported))}.")


def read_record(directory):
    """The `best.json` in `directory` as a dict, or None."""
    path = os.path.join(directory, BEST_RECORD_FILENAME)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class BestCheckpoint:
    """The best evaluation so far and its checkpoint in `<output_dir>/best/`.

    Args:
        output_dir: the run's folder. criterion: a `Criterion`.
        writes: whether this process writes (a multi-worker run's chief); every worker keeps
            the same record, so all stop at the same step.
        print_fn: where the lines about the record go.
    """

    def __init__(self, output_dir, criterion, writes=True, print_fn=print):
        self.directory = os.path.join(output_dir, BEST_SUBDIR)
        self.criterion = criterion
        self.writes = writes
        self.print_fn = print_fn
        self.record = self._resumed_record()

    def _resumed_record(self):
        """best.json of an earlier run of this output_dir, if it ranked by the same metric in
        the same direction; otherwise the record starts again, and a line says so."""
        record = read_record(self.directory)
        if record is None:
            return None
        if (record["metric"], record["minimize"]) != (self.criterion.metric,
                                                      self.criterion.minimize):
            self.print_fn(
                f"{os.path.join(self.directory, BEST_RECORD_FILENAME)} ranks by "
                f"{record['metric']} (minimize={record['minimize']}), this run by "
                f"{self.criterion.metric} (minimize={self.criterion.minimize}): the best "
                f"checkpoint is chosen afresh from the next evaluation, whose checkpoint replaces "
                f"step {record['step']}'s in {self.directory}.")
            return None
        if self.writes:
            self._remove_others(record["step"])  # what a kill between two writes left
        return record

    def path(self):
        """The best checkpoint's file, or None before the first evaluation."""
        return self.record and checkpoints.checkpoint_path(self.directory, self.record["step"])

    def add(self, step, scalars, save_weights, decodes=None):
        """Compares evaluation `scalars` of `step` with the best; on an improvement saves the
        weights (`save_weights(path)`) and best.json, then removes the previous best.

        `decodes`: the decodes file the scalars came from, relative to the output_dir.
        """
        metric = self.criterion.metric
        if metric not in scalars:
            raise unreported_metric_error(metric, scalars)
        value = float(scalars[metric])
        best = self.record and self.record["value"]
        if not is_improvement(value, best, self.criterion.minimize, self.criterion.delta):
            return
        self.record = {"step": step, "metric": metric, "value": value,
                       "minimize": self.criterion.minimize, "decodes": decodes}
        if self.writes:
            self._save(save_weights)

    def _save(self, save_weights):
        os.makedirs(self.directory, exist_ok=True)
        with atomic_path(self.path()) as temporary:
            save_weights(temporary)
        write_text_atomically(os.path.join(self.directory, BEST_RECORD_FILENAME),
                              json.dumps(self.record, indent=2) + "\n")
        self._remove_others(self.record["step"])

    def _remove_others(self, step):
        checkpoints.remove_partial_files(self.directory)
        for other_step, path in checkpoints.list_checkpoints(self.directory):
            if other_step != step:
                os.remove(path)

    def should_stop(self, step):
        """Whether early stopping ends training at `step`."""
        return self.record is not None and should_stop(step, self.record["step"],
                                                       self.criterion.patience)

    def stopping_line(self, step):
        criterion, record = self.criterion, self.record
        return (f"Early stopping at step {step}: {criterion.metric} has not improved by at "
                f"least {criterion.delta:g} in {step - record['step']} steps "
                f"(--eval_early_stopping_steps={criterion.patience}); the best checkpoint is "
                f"{self.path()} (step {record['step']}, {criterion.metric} "
                f"{record['value']:.4f}).")
