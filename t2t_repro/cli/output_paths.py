"""Where a command will write, checked before any work: a path that is a file, under a file,
missing or read-only is a one-line error at once, never a traceback or a result lost at the
end."""

import os
import re

from t2t_repro.errors import ConfigurationError
from t2t_repro.names import AVERAGED_MARKER, FLAGS_FILENAME, HPARAMS_FILENAME, RUN_SUBDIRS
from t2t_repro.utils.atomic_files import is_written_in_place

# The files a run folder keeps its records in, which every command reading the run reads.
RUN_RECORDS = (AVERAGED_MARKER, HPARAMS_FILENAME, FLAGS_FILENAME)


def _nearest_existing(path):
    """`path`, or its nearest ancestor that exists."""
    while not os.path.lexists(path):
        path = os.path.dirname(path)
    return path


def _check_writable(folder, flag, path):
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigurationError(f"{flag}={path} cannot be written: {folder} is read-only for "
                                 f"this user; name a folder you can write in.")


def check_output_dir(path, flag="--output_dir"):
    """Raises ConfigurationError unless `path` is a folder this process can write in, or one it
    can create (every missing parent included)."""
    absolute = os.path.abspath(path)
    if os.path.islink(absolute) and not os.path.exists(absolute):
        raise ConfigurationError(f"{flag}={path} is a symbolic link to "
                                 f"{os.readlink(absolute)}, which does not exist; create that "
                                 f"folder, or name another.")
    if os.path.lexists(absolute) and not os.path.isdir(absolute):
        raise ConfigurationError(f"{flag}={path} is a file, not a folder; name a folder (it is "
                                 f"created if missing).")
    existing = _nearest_existing(absolute)
    if not os.path.isdir(existing):
        raise ConfigurationError(f"{flag}={path} cannot be created: {existing} is a file, not "
                                 f"a folder.")
    _check_writable(existing, flag, path)


def check_output_file(path, flag):
    """Raises ConfigurationError unless `path` names a file that can be written atomically: not
    a folder, in an existing folder where this process can create a file beside it. A device
    or a pipe (`/dev/null`, a FIFO, a shell's `>(...)`) is written in place (`atomic_files`),
    and need only be writable itself."""
    if os.path.isdir(path):
        raise ConfigurationError(f"{flag}={path} is a folder; name a file (in that folder or "
                                 f"elsewhere).")
    if is_written_in_place(path):
        if not os.access(path, os.W_OK):
            raise ConfigurationError(f"{flag}={path} cannot be written by this user; name "
                                     f"another output.")
        return
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ConfigurationError(f"{flag}={path} cannot be written: its folder {folder} does not "
                                 f"exist; create it first.")
    _check_writable(folder, flag, path)


def check_not_an_input(path, flag, inputs):
    """Raises ConfigurationError when the output `path` is one of `inputs` ({flag: path} of the
    files the command reads): writing it would replace what the command was given."""
    for input_flag, input_path in inputs.items():
        if (input_path and os.path.exists(path) and os.path.exists(input_path)
                and os.path.samefile(path, input_path)):
            raise ConfigurationError(f"{flag}={path} is the {input_flag} file; writing it would "
                                     f"replace it. Name another output file.")


def check_not_a_checkpoint(path, flag):
    """Raises ConfigurationError when the output `path` is an existing checkpoint (Keras
    weights, `*.weights.h5`) or a symbolic link to one, or is named as one: no command's text
    may replace a model, nor lie where commands would load it as one."""
    if not os.path.realpath(path).endswith(".weights.h5") and not path.endswith(".weights.h5"):
        return
    if os.path.exists(path):
        raise ConfigurationError(f"{flag}={path} is a checkpoint; writing it would replace it. "
                                 f"Name another output file.")
    raise ConfigurationError(f"{flag}={path} is named as a checkpoint (*.weights.h5), and "
                             f"commands would read it as one. Name another output file.")


def check_not_kept(path, flag, run_dir, data_dir, data_name):
    """Raises ConfigurationError when the output `path` lies in one of the run `run_dir`'s own
    subfolders (TensorBoard's events, the best checkpoint, exports: new files there would be
    read as the run's), or is an existing file that the run or its data keeps and reads
    again: a file of the data named `data_name` in `data_dir` (datagen's record, examples and
    vocabularies, named `<data_name>.*` and `<data_name>-*`), the run's hparams.json,
    flags.txt or averaged.json, or the records of an averaged model's folder (avg_checkpoints'
    averaged.json, hparams.json and flags.txt, which the trainer and a new average read).
    Other files anywhere else may be written (a decode written before, replaced)."""
    real = os.path.realpath(path)
    for subdir in RUN_SUBDIRS if run_dir else ():
        if real.startswith(os.path.realpath(os.path.join(run_dir, subdir)) + os.sep):
            raise ConfigurationError(f"{flag}={path} is in the run's {subdir}/, which holds "
                                     f"what the run keeps. Name an output file outside it.")
    if not os.path.isfile(path):
        return
    folder, name = os.path.split(real)
    kept = None
    if (data_dir and data_name and folder == os.path.realpath(data_dir)
            and re.match(rf"{re.escape(data_name)}[.-]", name)):
        kept = f"a file of the {data_name} data in {data_dir}"
    if run_dir and folder == os.path.realpath(run_dir) and name in RUN_RECORDS:
        kept = f"the run's {name}"
    elif name in RUN_RECORDS and os.path.exists(os.path.join(folder, AVERAGED_MARKER)):
        kept = f"a record of the averaged model in {folder}"
    if kept:
        raise ConfigurationError(f"{flag}={path} is {kept}; writing it would replace it. Name "
                                 f"another output file.")
