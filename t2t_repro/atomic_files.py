"""Files written whole or not at all: a temporary file beside the target, flushed to disk, then
renamed over it, so a run killed mid-write leaves the old file or the new one, never half."""

import os

TEMPORARY_MARK = ".tmp-"


def write_text_atomically(path, text):
    directory, name = os.path.split(path)
    temporary = os.path.join(directory, f".{name}{TEMPORARY_MARK}{os.getpid()}")
    with open(temporary, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)


def is_temporary(filename):
    """Whether `filename` is a temporary file this module (or a checkpoint save) left."""
    return filename.startswith(".") and TEMPORARY_MARK in filename
