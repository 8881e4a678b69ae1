"""Peak resident memory of benchmark contenders.

A contender that runs in a process of its own (`run_in_own_process`) returns all its memory
when it ends, so the next one starts clean, and the process's peak is its own. Contenders that
share a process are measured between `reset_peak()` and `peak_bytes()`: the process's peak
while that contender ran, which includes what the process already held.
"""

import concurrent.futures
import multiprocessing
import resource

_STATUS = "/proc/self/status"


def run_in_own_process(function, *args):
    """`(function(*args), peak resident bytes)` from a fresh process (spawned, so that it
    inherits none of this one's memory). `function` and `args` must pickle: a module-level
    function, plain values and arrays. An exception in it is raised here."""
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        return pool.submit(_with_peak, function, *args).result()


def _with_peak(function, *args):
    result = function(*args)
    return result, peak_bytes()


def reset_peak():
    """Starts a new peak at the current resident size (Linux: `clear_refs` 5); elsewhere the
    peak stays the process's since it started."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_bytes():
    """Peak resident bytes of this process since it started or the last `reset_peak()`."""
    try:
        with open(_STATUS) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
