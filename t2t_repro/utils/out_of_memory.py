"""A backend's out-of-memory error as a one-line UserError that says which settings decide the
memory: a command asked for more than the machine has stops with that advice, not a
traceback. The backends' errors are recognised by name, so that nothing here imports them."""

import contextlib
import re

from t2t_repro.errors import UserError

# TensorFlow's and PyTorch's out-of-memory errors; JAX's is an XlaRuntimeError whose message
# starts with XLA's status.
_ERROR_NAMES = {"ResourceExhaustedError", "OutOfMemoryError"}
_XLA_STATUS = "RESOURCE_EXHAUSTED"
_ALLOCATION = re.compile(r"OOM when allocating tensor with shape\[[^\]]*\]|Out of memory[^.\n]*")


class OutOfMemoryError(UserError):
    """The work needs more memory than the machine has; the message names what to lower."""


def is_out_of_memory(error):
    """Whether `error` is a backend's (or Python's) report of memory it could not allocate."""
    if isinstance(error, MemoryError):
        return True
    if {cls.__name__ for cls in type(error).__mro__} & _ERROR_NAMES:
        return True
    return isinstance(error, RuntimeError) and str(error).lstrip().startswith(_XLA_STATUS)


def allocation(error):
    """The part of an out-of-memory message that says what could not be allocated."""
    found = _ALLOCATION.search(str(error))
    if found:
        return found.group(0)
    first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return first_line[:200]


@contextlib.contextmanager
def advice_when_out_of_memory(work, advice):
    """Turns an out-of-memory error raised inside into OutOfMemoryError: "`work` ran out of
    memory (what it could not allocate); `advice`"."""
    try:
        yield
    except Exception as error:
        if not is_out_of_memory(error):
            raise
        raise OutOfMemoryError(f"{work} ran out of memory ({allocation(error)}); {advice}") \
            from None
