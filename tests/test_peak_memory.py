"""The benchmarks' memory figures: a contender's own process reports its peak resident size,
returns its result and raises its errors; in one process, a peak starts again at a reset."""

import numpy as np
import pytest

from t2t_repro.bench.peak_memory import peak_bytes, reset_peak, run_in_own_process

MIB = 2**20


def touch_megabytes(megabytes):
    """Holds `megabytes` MiB of written pages at once; returns their byte count."""
    block = np.ones(megabytes * MIB, np.uint8)
    return int(block.sum())


def fail(message):
    raise ValueError(message)


def test_a_contender_process_reports_its_own_peak_and_result():
    small, small_peak = run_in_own_process(touch_megabytes, 1)
    large, large_peak = run_in_own_process(touch_megabytes, 400)
    assert (small, large) == (MIB, 400 * MIB)
    # The same fresh process but for the block: the difference is the block, within what the
    # interpreter's own allocations vary by.
    assert 400 * MIB - 16 * MIB <= large_peak - small_peak <= 420 * MIB


def test_an_error_in_a_contender_process_is_raised_here():
    with pytest.raises(ValueError, match="out of patience"):
        run_in_own_process(fail, "out of patience")


def test_a_reset_starts_the_peak_again_at_the_current_size():
    reset_peak()
    settled = peak_bytes()
    touch_megabytes(300)  # freed at once, but the peak keeps it
    assert peak_bytes() - settled >= 300 * MIB - 16 * MIB
    reset_peak()
    assert peak_bytes() - settled <= 32 * MIB  # the block is gone from the new peak
    touch_megabytes(100)
    assert 100 * MIB - 16 * MIB <= peak_bytes() - settled <= 140 * MIB
