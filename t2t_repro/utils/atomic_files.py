"""Files written whole or not at all: written under a temporary name beside the target, flushed
to disk, then renamed over it, so a run killed mid-write leaves the old file or the new one,
never half. Every such write in t2t_repro goes through `atomic_path`, so every temporary has
one name pattern, `.tmp-<pid>-<name>`, which `is_temporary` recognises for start-up clean-ups."""

import contextlib
import os
import re
import shutil

_TEMPORARY_PREFIX = ".tmp-"
_TEMPORARY_NAME = re.compile(r"^\.tmp-([0-9]+)-(.+)$")


def temporary_path(path):
    """`<dir>/.tmp-<pid>-<name>` for `path`: beside it (so the rename stays on one file system),
    hidden, unique to this process, and ending as `path` does (Keras's `save_weights` insists
    on a name ending in `.weights.h5`)."""
    directory, name = os.path.split(path.rstrip(os.sep) or path)
    return os.path.join(directory, f"{_TEMPORARY_PREFIX}{os.getpid()}-{name}")


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def is_written_in_place(path):
    """Whether `path` exists as something other than a file or a folder: a device or a pipe
    (`/dev/null`, `/dev/stdout`, a FIFO, a shell's `>(...)`), which a rename would replace
    with a file instead of writing to."""
    return os.path.exists(path) and not (os.path.isfile(path) or os.path.isdir(path))


@contextlib.contextmanager
def atomic_path(path):
    """Yields a temporary path beside `path` to write a file or a folder at; on leaving the
    block without an error, fsyncs it (a file) and renames it over `path`. On an error it
    removes the temporary and re-raises, leaving `path` as it was. A folder can only replace
    a missing (or empty) `path`. A symbolic link's target is what is replaced, so the link
    stays; a device or a pipe (`is_written_in_place`) is yielded itself, and written as a
    shell's redirection writes it."""
    if is_written_in_place(path):
        yield path
        return
    if os.path.islink(path):
        path = os.path.realpath(path)
    temporary = temporary_path(path)
    try:
        yield temporary
        if os.path.isfile(temporary):
            descriptor = os.open(temporary, os.O_RDONLY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
        os.replace(temporary, path.rstrip(os.sep) or path)
    except BaseException:
        _remove(temporary)
        raise


def write_text_atomically(path, text):
    """Writes `text` (UTF-8) to `path` through `atomic_path`."""
    with atomic_path(path) as temporary:
        with open(temporary, "w", encoding="utf-8") as f:
            f.write(text)


def is_temporary(filename):
    """Whether `filename` (a name, not a path) is an `atomic_path` temporary: what a run killed
    mid-write leaves behind."""
    return _TEMPORARY_NAME.match(filename) is not None


def remove_abandoned_temporaries(directory):
    """Deletes the temporaries in `directory` of processes no longer running (a writer
    killed mid-write), leaving those of live ones, which other writers sharing the folder may
    still be renaming into place."""
    for filename in os.listdir(directory) if os.path.isdir(directory) else ():
        match = _TEMPORARY_NAME.match(filename)
        if match and not _is_running(int(match[1])):
            _remove(os.path.join(directory, filename))


def _is_running(pid):
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except (ProcessLookupError, OverflowError):  # none has this number; none could
        return False
    except PermissionError:  # another user's
        pass
    return True


def target_name(filename):
    """The name a temporary `filename` was to be renamed to, or None if it is no temporary."""
    match = _TEMPORARY_NAME.match(filename)
    return match.group(2) if match else None
