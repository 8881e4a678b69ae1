"""One trainer per run folder: the trainer holds an exclusive `flock` on `<output_dir>/.lock`
while it runs, and a second trainer on the folder is refused. The kernel releases the lock when
its holder exits, however it ends, so a killed trainer never leaves a stale lock; the file
records the holder's pid, to name it in the refusal."""

import contextlib
import fcntl
import os

from t2t_repro.errors import UserError
from t2t_repro.names import LOCK_FILENAME


class FolderInUseError(UserError):
    """Another trainer holds the run folder's lock."""


def _holder(descriptor):
    """The pid the lock file records, as text ("unknown" before its holder has written it)."""
    return os.pread(descriptor, 32, 0).decode("ascii", "replace").strip() or "unknown"


@contextlib.contextmanager
def held(output_dir):
    """Holds `output_dir`'s lock (creating the folder) for the block; raises FolderInUseError,
    naming the folder and the holder's pid, when another process holds it."""
    os.makedirs(output_dir, exist_ok=True)
    descriptor = os.open(os.path.join(output_dir, LOCK_FILENAME), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderInUseError(
                f"--output_dir={output_dir} is in use by another trainer (pid "
                f"{_holder(descriptor)}); one trainer at a time writes a run folder: wait for it "
                f"to end, or train in another --output_dir.") from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        os.close(descriptor)
