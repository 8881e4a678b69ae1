"""Checkpoint averaging: a checkpoint whose model weights are the mean of several checkpoints'.

The paper decodes with the average of the last 5 checkpoints (base) or 20 (big). This works on
the `.weights.h5` files directly with h5py, so it needs no model, is fast, and works for any model.
Keras writes a compiled model's optimizer variables under the top-level group named after the
model's `optimizer` attribute; those, and every non-float dataset, are taken from the newest
checkpoint, so the result has the training checkpoints' layout and `model.load_weights` reads it
like any of them. `average_run` averages a run's last checkpoints into a folder of their own
(what `python -m t2t_repro.avg_checkpoints` does).
"""

import contextlib
import json
import os
import shutil

import h5py
import ml_dtypes
import numpy as np

from t2t_repro import hparams as hparams_lib
from t2t_repro.errors import ConfigurationError, UserError, is_whole_number
from t2t_repro.names import (AVERAGED_MARKER, AVERAGED_SUBDIR, BEST_SUBDIR, FLAGS_FILENAME,
                             HPARAMS_FILENAME, RUN_SUBDIRS)
from t2t_repro.training import run_records
from t2t_repro.utils.atomic_files import atomic_path, write_text_atomically

OPTIMIZER_GROUP = "optimizer"


class CheckpointLayoutError(UserError, ValueError):
    """Checkpoints that do not hold the same datasets with the same shapes and dtypes."""


def _datasets(h5_file):
    """{name: dataset} of every dataset in the file, at any depth."""
    found = {}

    def collect(name, obj):
        if isinstance(obj, h5py.Dataset):
            found[name] = obj

    h5_file.visititems(collect)
    return found


def _check_same_layout(path, datasets, reference_path, reference):
    """Raises CheckpointLayoutError naming the first dataset (by name) that differs."""
    for name in sorted(set(datasets) | set(reference)):
        if name not in reference:
            raise CheckpointLayoutError(
                f"{path} has a dataset '{name}' that {reference_path} lacks; checkpoints of "
                f"different models cannot be averaged."
            )
        if name not in datasets:
            raise CheckpointLayoutError(
                f"{path} lacks the dataset '{name}' that {reference_path} has; checkpoints of "
                f"different models cannot be averaged."
            )
        ours, theirs = datasets[name], reference[name]
        if (ours.shape, ours.dtype) != (theirs.shape, theirs.dtype):
            raise CheckpointLayoutError(
                f"dataset '{name}' is {ours.dtype}{list(ours.shape)} in {path} but "
                f"{theirs.dtype}{list(theirs.shape)} in {reference_path}; checkpoints of "
                f"different models cannot be averaged."
            )


def _float_dtype(dataset):
    """The float dtype of the dataset's values, or None (integers, strings, booleans)."""
    # HDF5 has no bfloat16: Keras stores its raw 2-byte values and marks the dataset.
    if dataset.attrs.get("dtype") == "bfloat16":
        return np.dtype(ml_dtypes.bfloat16)
    return dataset.dtype if np.issubdtype(dataset.dtype, np.floating) else None


def average_checkpoints(paths, output_path):
    """Writes to `output_path` a checkpoint whose model weights are the mean of `paths`'.

    Args:
        paths: checkpoints of one model, oldest first; the optimizer's variables and every
            non-float dataset are copied from the last (newest) one.
        output_path: the averaged `.weights.h5` file; written under a temporary name and
            renamed, so it is never seen half-written. It may not be one of `paths`.

    Returns:
        output_path.

    Raises:
        CheckpointLayoutError: the checkpoints differ in a dataset's name, shape or dtype.
        ConfigurationError: one of them cannot be read (it is named).
    """
    from t2t_repro.training import checkpoints

    if not paths:
        raise ValueError("No checkpoints to average.")
    if any(os.path.realpath(path) == os.path.realpath(output_path) for path in paths):
        raise ValueError(f"{output_path} is one of the checkpoints being averaged; "
                         f"write the average elsewhere.")
    newest = paths[-1]
    directory = os.path.dirname(os.path.abspath(output_path))
    with contextlib.ExitStack() as stack:
        sources = [_datasets(stack.enter_context(checkpoints.opened(path))) for path in paths]
        for path, datasets in zip(paths[:-1], sources[:-1]):
            _check_same_layout(path, datasets, newest, sources[-1])
        os.makedirs(directory, exist_ok=True)
        with atomic_path(output_path) as temporary:
            shutil.copyfile(newest, temporary)
            with h5py.File(temporary, "r+") as output:
                for name, target in _datasets(output).items():
                    dtype = _float_dtype(target)
                    if dtype is None or name.split("/", 1)[0] == OPTIMIZER_GROUP:
                        continue
                    total = np.zeros(target.shape, np.float64)
                    for datasets in sources:
                        total += np.asarray(datasets[name][()]).view(dtype)
                    target[()] = (total / len(paths)).astype(dtype).view(target.dtype)
    return output_path



def average_run(output_dir, avg_dir, n, last=None, print_fn=print):
    """Averages the newest `n` checkpoints of the run in `output_dir` into `avg_dir`; returns
    the average's path, `<avg_dir>/ckpt-<newest step>.weights.h5`.

    With `last` (a checkpoint file of the run, such as its best/ one) the `n` are those ending
    at it: it, and the run's newest checkpoints older than its step. `avg_dir` gets a copy of
    the run's hparams.json and flags.txt (`run_records.copy_run_record`) and `averaged.json`
    naming the run and the steps, so it is itself a run folder to decode, evaluate and export
    from, which the trainer refuses to train in; an earlier average there is replaced, so that
    the folder's one checkpoint is the average its averaged.json describes. The run's own files
    are only read.
    """
    from t2t_repro.training import checkpoints

    if not is_whole_number(n) or n < 1:
        raise ConfigurationError(f"n={n!r}: average at least one checkpoint (n is a whole "
                                 f"number of them, 1 or more).")
    if os.path.realpath(avg_dir) == os.path.realpath(output_dir):
        raise ConfigurationError("--avg_dir must differ from --output_dir: the average would "
                                 "replace the run's newest checkpoint.")
    for name in RUN_SUBDIRS:
        if os.path.realpath(avg_dir) == os.path.realpath(os.path.join(output_dir, name)):
            raise ConfigurationError(
                f"--avg_dir={avg_dir} is the run's {name}/ folder, which the run's commands "
                f"write; name a folder of the average's own (by default "
                f"{os.path.join(output_dir, AVERAGED_SUBDIR)}).")
    if not os.path.isdir(output_dir):
        raise ConfigurationError(f"--output_dir {output_dir} does not exist.")
    _check_average_folder(avg_dir, output_dir)
    hparams_lib.load(output_dir)  # a damaged record is an error before anything is written
    found = checkpoints.list_checkpoints(output_dir)
    if last is not None:
        found = _ending_at(found, last, output_dir)
    if not found:
        raise ConfigurationError(f"No checkpoints (ckpt-<step>.weights.h5) in {output_dir}.")
    if len(found) < n:
        which = "in" if last is None else f"up to step {found[-1][0]} in"
        print_fn(f"Only {len(found)} checkpoint(s) {which} {output_dir} (older ones were not "
                 f"written, or --keep_checkpoint_max removed them), fewer than the {n} asked "
                 f"for; averaging those.")
    chosen = found[-n:]
    steps = [step for step, _ in chosen]
    path = average_checkpoints([path for _, path in chosen],
                               checkpoints.checkpoint_path(avg_dir, steps[-1]))
    run_records.copy_run_record(output_dir, avg_dir)
    write_text_atomically(os.path.join(avg_dir, AVERAGED_MARKER), json.dumps({
        "averaged_from": os.path.abspath(output_dir), "steps": steps}) + "\n")
    for _, earlier in checkpoints.list_checkpoints(avg_dir):
        if earlier != path:
            os.remove(earlier)
    print_fn(f"Averaged {len(chosen)} checkpoint(s) of {output_dir}, steps "
             f"{', '.join(map(str, steps))}, into {path}.")
    return path


def _check_average_folder(avg_dir, output_dir):
    """ConfigurationError when `avg_dir` holds another run's files (a run record or
    checkpoints), which averaging would replace; an earlier average of `output_dir`'s run
    (its averaged.json says so) is written over, as a new average should be."""
    from t2t_repro.training import checkpoints

    held = [name for name in (HPARAMS_FILENAME, FLAGS_FILENAME) if
            os.path.exists(os.path.join(avg_dir, name))]
    held += [os.path.basename(path) for _, path in checkpoints.list_checkpoints(avg_dir)]
    averaged_from = checkpoints.averaged_from(avg_dir)
    if not held or (averaged_from is not None and
                    os.path.realpath(averaged_from) == os.path.realpath(output_dir)):
        return
    raise ConfigurationError(
        f"--avg_dir={avg_dir} holds files of another run ({', '.join(held)}), which the "
        f"average would replace; name a new folder, or an earlier average of {output_dir}.")


def _ending_at(found, last, output_dir):
    """The run's `[(step, path)]` checkpoints `found` that come before the checkpoint file
    `last`, then `last` itself; a ConfigurationError when `last` is not of the run in
    `output_dir` (its folder or best/), whose checkpoints it would be averaged with."""
    from t2t_repro.training import checkpoints

    run_dir = run_records.run_dir_of(last)
    if run_dir is None or os.path.realpath(run_dir) != os.path.realpath(output_dir):
        raise ConfigurationError(
            f"--checkpoint_path names {last}, which is not a checkpoint of the run in "
            f"{output_dir} (nor of its {BEST_SUBDIR}/), whose checkpoints it would be averaged "
            f"with; name one of that run's, or give --output_dir the run it belongs to.")
    step = checkpoints.checkpoint_step(last)
    if step is None:
        raise ConfigurationError(f"--checkpoint_path names {last}, which is no "
                                 f"ckpt-<step>.weights.h5: its step orders the average.")
    return [(older, path) for older, path in found if older < step] + [(step, last)]
