"""Checkpoints of model weights and optimizer state, written atomically, the last K kept.

A checkpoint is Keras's `.weights.h5` of a compiled model, which holds the optimizer's
variables (its step counter included) beside the model's, so restoring one resumes training
exactly where it stopped. Files are written under a temporary name and renamed, so a run killed
mid-write never leaves a half-written checkpoint that looks complete. Each file also holds
its model's hparams, the name of its problem and the digests of the vocabulary files it was
built for, so that a checkpoint copied out of its run still says what model it is, what task it
learned and what text it reads.
"""

import contextlib
import hashlib
import json
import os
import re
import shutil
import time

import keras

from t2t_repro.errors import ConfigurationError
from t2t_repro import hparams as hparams_lib
from t2t_repro.utils.atomic_files import atomic_path, is_temporary, target_name
from t2t_repro.names import (AVERAGED_MARKER, CHECKPOINT_HPARAMS_ATTRIBUTE,
                             CHECKPOINT_PROBLEM_ATTRIBUTE, CHECKPOINT_VOCABULARIES_ATTRIBUTE)

_CHECKPOINT_PATTERN = re.compile(r"^ckpt-(\d+)\.weights\.h5$")


def checkpoint_path(directory, step):
    return os.path.join(directory, f"ckpt-{step}.weights.h5")


def checkpoint_step(path):
    """The training step in a checkpoint's file name (`ckpt-<step>.weights.h5`), or None."""
    match = _CHECKPOINT_PATTERN.match(os.path.basename(path))
    return int(match.group(1)) if match else None


def vocabulary_digests(problem):
    """{side: SHA-256 of its vocabulary file} for the files `problem` encodes with that exist
    ({} for a problem whose tokens are ids): what a model built for it stores in its
    checkpoints (`save_weights`)."""
    digests = {}
    for side, path in problem.vocabulary_files().items():
        if os.path.exists(path):
            with open(path, "rb") as f:  # a vocabulary file is small
                digests[side] = hashlib.sha256(f.read()).hexdigest()
    return digests


def vocabulary_difference(stored, problem, digests):
    """The words `another <side> vocabulary than <problem's file>` for the first side whose
    digest in `stored` is not `problem`'s (`digests`, as `vocabulary_digests` gives them); None
    when every stored side matches."""
    for side, digest in stored.items():
        if digests.get(side) == digest:
            continue
        path = problem.vocabulary_files().get(side)
        if path is None:
            than = f"--problem={problem.name}'s, which has none"
        elif side in digests:
            than = f"{path} (SHA-256 {digests[side][:12]}, the checkpoint's {digest[:12]})"
        else:
            than = f"{path}, which is missing"
        return f"another {side} vocabulary than {than}"
    return None


def save_weights(model, path):
    """Keras's `model.save_weights(path)`, with the model's hparams, its vocabularies' digests
    and its problem's name (where it has them: `training.run.build_model` gives them) stored
    in the file's attributes (`stored_hparams`, `stored_vocabulary_digests`,
    `stored_problem`)."""
    import h5py

    model.save_weights(path)
    hparams = getattr(model, "hparams", None)
    digests = getattr(model, "vocabulary_digests", None)
    problem_name = getattr(model, "problem_name", None)
    with h5py.File(path, "r+") as weights:
        if isinstance(hparams, hparams_lib.HParams):
            weights.attrs[CHECKPOINT_HPARAMS_ATTRIBUTE] = hparams.to_json()
        if digests:
            weights.attrs[CHECKPOINT_VOCABULARIES_ATTRIBUTE] = json.dumps(dict(digests))
        if problem_name:
            weights.attrs[CHECKPOINT_PROBLEM_ATTRIBUTE] = problem_name


def check_readable(path):
    """ConfigurationError naming `path` when h5py cannot open it (cut short, or written over
    outside the trainer, whose writes are atomic), where h5py's own error names no file."""
    with opened(path):
        pass


@contextlib.contextmanager
def opened(path):
    """The checkpoint `path` open for reading with h5py; the ConfigurationError of
    `check_readable` when it cannot be."""
    import h5py

    if not os.path.exists(path):
        raise removed_while_read(path)
    if not h5py.is_hdf5(path):
        why = "not HDF5: cut short or written over"
    else:
        try:
            weights = h5py.File(path, "r")
        except OSError as error:
            why = f"HDF5 that h5py cannot open: {error}"
        else:
            with weights:
                yield weights
            return
    raise ConfigurationError(
        f"{path} is not a readable checkpoint ({why}); restore it from a copy, or move it out "
        f"of its folder (a run then resumes from the checkpoint before it).")


def removed_while_read(path):
    """The ConfigurationError for a checkpoint found, then gone before it was read: a trainer
    still running keeps only its newest --keep_checkpoint_max."""
    return ConfigurationError(
        f"{path} was removed while this command read it (a trainer still writing to its "
        f"folder keeps only its newest --keep_checkpoint_max checkpoints); run the command "
        f"again, or name a checkpoint that stays (one copied out, or an average).")


def _stored_attribute(path, name):
    with opened(path) as weights:
        return weights.attrs.get(name)


def stored_vocabulary_digests(path):
    """The vocabulary digests `save_weights` stored in the checkpoint `path` ({side: SHA-256});
    None for a file written otherwise, or by a model of a problem without vocabulary files."""
    stored = _stored_attribute(path, CHECKPOINT_VOCABULARIES_ATTRIBUTE)
    if stored is None:
        return None
    try:
        digests = json.loads(stored)
        if not (isinstance(digests, dict)
                and all(isinstance(digest, str) for digest in digests.values())):
            raise TypeError(f"a JSON {type(digests).__name__}, not an object of strings")
    except (ValueError, TypeError) as error:
        raise ConfigurationError(
            f"{path}'s {CHECKPOINT_VOCABULARIES_ATTRIBUTE} attribute holds no readable "
            f"vocabulary digests ({error}). Restore the checkpoint from a copy, or name "
            f"another.") from None
    return digests


def stored_problem(path):
    """The name of the problem whose model wrote the checkpoint `path` (`save_weights`); None
    for a file written otherwise."""
    stored = _stored_attribute(path, CHECKPOINT_PROBLEM_ATTRIBUTE)
    if stored is not None and not isinstance(stored, str):
        raise ConfigurationError(
            f"{path}'s {CHECKPOINT_PROBLEM_ATTRIBUTE} attribute holds no readable problem name "
            f"(stored as {type(stored).__name__}, not as a string). Restore the checkpoint from "
            f"a copy, or name another.")
    return stored


def stored_hparams(path):
    """The model hparams `save_weights` stored in the checkpoint `path`; None for a file
    written otherwise (by Keras alone, or before checkpoints held them). HParamsError when
    they cannot be read."""
    stored = _stored_attribute(path, CHECKPOINT_HPARAMS_ATTRIBUTE)
    if stored is None:
        return None
    return hparams_lib.from_json(
        stored, f"{path}'s {CHECKPOINT_HPARAMS_ATTRIBUTE} attribute holds no readable hparams",
        "Restore the checkpoint from a copy, or name another.")


def list_checkpoints(directory):
    """[(step, path)] of the complete checkpoints in `directory`, oldest first."""
    if not os.path.isdir(directory):
        return []
    found = []
    for filename in os.listdir(directory):
        match = _CHECKPOINT_PATTERN.match(filename)
        if match:
            found.append((int(match.group(1)), os.path.join(directory, filename)))
    return sorted(found)


def averaged_from(directory):
    """The training run whose checkpoints `directory` holds the average of (avg_checkpoints
    marks it with `averaged.json`), or None for any other folder."""
    path = os.path.join(directory, AVERAGED_MARKER)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f).get("averaged_from", "another run")
    except (ValueError, AttributeError):  # not JSON, not UTF-8, or no JSON object
        raise ConfigurationError(
            f"{path} is not a readable {AVERAGED_MARKER} (avg_checkpoints marks an averaged "
            f"model's folder with it); average into a new --avg_dir, or delete {directory} "
            f"and average again.") from None


def is_partial_checkpoint(filename):
    """Whether `filename` is a checkpoint still being written, or left half-written by a killed
    run: an `atomic_files` temporary of a `ckpt-<step>.weights.h5` name."""
    name = target_name(os.path.basename(filename))
    return name is not None and _CHECKPOINT_PATTERN.match(name) is not None


def remove_partial_files(directory):
    """Deletes what a killed run left half-written in `directory`: every `atomic_files`
    temporary (checkpoints, hparams.json, flags)."""
    if not os.path.isdir(directory):
        return
    for filename in os.listdir(directory):
        if is_temporary(filename):
            path = os.path.join(directory, filename)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.remove(path)


def latest_checkpoint(directory):
    """Path of the newest checkpoint in `directory`, or None."""
    checkpoints = list_checkpoints(directory)
    return checkpoints[-1][1] if checkpoints else None


def check_checkpoint_file(path, named):
    """Raises ConfigurationError, calling the file `named` (as its flag gave it), unless `path`
    is a checkpoint as training and avg_checkpoints write them: Keras weights in HDF5, named
    `*.weights.h5` (Keras loads nothing else)."""
    import h5py

    if not (path.endswith(".weights.h5") and h5py.is_hdf5(path)):
        raise ConfigurationError(
            f"{named} is not a checkpoint (Keras weights in HDF5, named "
            f"ckpt-<step>.weights.h5); name a checkpoint file, or a directory holding one.")


def named_checkpoint(path, named=None):
    """The checkpoint file `path` names: itself, if it is a checkpoint
    (`check_checkpoint_file`), or the newest in the folder it names (the one a folder such as
    `<output_dir>/best` holds). A ConfigurationError calling it `named` (as its flag gave it;
    default: the path) when it is neither."""
    named = named or path
    if os.path.isfile(path):
        check_checkpoint_file(path, named)
        return path
    if not os.path.exists(path):
        raise ConfigurationError(f"{named} does not exist; name a checkpoint file or a folder "
                                 f"holding one.")
    checkpoint = latest_checkpoint(path)
    if checkpoint is None:
        raise ConfigurationError(
            f"{named} holds no checkpoint (ckpt-<step>.weights.h5); train first, or name a "
            f"checkpoint file or a folder holding one.")
    return checkpoint


class CheckpointManager:
    """Saves `ckpt-<step>.weights.h5` files in `directory` and keeps the newest `max_to_keep`.

    The model must be compiled and built (and its optimizer built) before saving or restoring.
    With `writes=False` (a multi-worker run's non-chief workers) saving does nothing.
    """

    def __init__(self, directory, model, max_to_keep=20, writes=True):
        if max_to_keep < 1:
            raise ValueError(f"max_to_keep must be at least 1, got {max_to_keep}.")
        self.directory = directory
        self.model = model
        self.max_to_keep = max_to_keep
        self.writes = writes
        if writes:
            remove_partial_files(directory)

    def step(self):
        return int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

    def save(self):
        """Writes the checkpoint of the current step (if not written yet) and prunes old ones."""
        if not self.writes:
            return None
        os.makedirs(self.directory, exist_ok=True)
        step = self.step()
        path = checkpoint_path(self.directory, step)
        if not os.path.exists(path):
            with atomic_path(path) as temporary:
                save_weights(self.model, temporary)
        for _, old_path in list_checkpoints(self.directory)[: -self.max_to_keep]:
            os.remove(old_path)
        return path

    def restore(self, path=None):
        """Loads `path` (default: the latest checkpoint); returns the restored step, or 0."""
        path = path or latest_checkpoint(self.directory)
        if path is None:
            return 0
        check_readable(path)
        self.model.load_weights(path)
        return self.step()


# Steps between checkpoints when --save_checkpoints_steps is not given, for sets that are not
# the paper's models.
DEFAULT_SAVE_CHECKPOINTS_STEPS = 1000


def default_save_checkpoints_steps(hparams_set, every_minutes):
    """Steps between checkpoints when none are given: 0 (time alone) for the paper's sets
    (marked `checkpoints_by_time`), whose §6.1 averages "the last 5 checkpoints, which were
    written at 10-minute intervals", while a time interval is set; else 1000."""
    by_time = getattr(hparams_set, "checkpoints_by_time", False)
    return 0 if by_time and every_minutes > 0 else DEFAULT_SAVE_CHECKPOINTS_STEPS


class CheckpointSchedule:
    """Saves every `every_steps` steps and every `every_minutes` minutes (0 disables either;
    a save of either kind restarts the minutes); the training loop calls `after_update` after
    each optimizer update. `clock` gives seconds (default `time.monotonic`)."""

    def __init__(self, manager, every_steps=0, every_minutes=10.0, clock=None):
        self.manager = manager
        self.every_steps = every_steps
        self.every_seconds = every_minutes * 60.0
        self._clock = clock or time.monotonic
        self._last_save_time = self._clock()

    def after_update(self, step):
        due_by_steps = self.every_steps and step % self.every_steps == 0
        due_by_time = (
            self.every_seconds and self._clock() - self._last_save_time >= self.every_seconds
        )
        if due_by_steps or due_by_time:
            self.manager.save()
            self._last_save_time = self._clock()
