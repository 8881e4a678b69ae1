"""Known lines that libraries print to standard error, dropped, everything else kept.

What C++ code writes goes to file descriptor 2 directly, where Python's logging cannot filter
it, so the descriptor itself is captured for a block and the captured text written back without
the known lines; what TensorFlow logs through absl's Python logger is filtered at that logger,
wherever its handlers write. Each known line is a notice about a choice this project made on
purpose that reads like a problem to a user.
"""

import contextlib
import logging
import os
import re
import sys
import tempfile

# tensorflow-text's copy of sentencepiece, building a tokenizer of a model trained without
# normalisation (`data/vocabulary.py` says why): an INFO line at every build or load.
SENTENCEPIECE_IDENTITY_NORMALIZATION = re.compile(
    r"^normalizer\.cc\(\d+\) LOG\(INFO\) precompiled_charsmap is empty\. "
    r"use identity normalization\.$")
# TensorFlow loading a SavedModel saved without its custom gradients, as exports are
# (`serving/export.py`, INFERENCE_ONLY: nothing differentiates an export); one per function.
UNSAVED_CUSTOM_GRADIENTS = re.compile(
    r"Importing a function \(.*\) with ops with unsaved custom gradients\. "
    r"Will likely fail if a gradient is requested\.$")


@contextlib.contextmanager
def stderr_filtered(without_noise):
    """Captures file descriptor 2 for the block, then writes back `without_noise(captured
    text)` (even when the block raises)."""
    sys.stderr.flush()
    saved_stderr = os.dup(2)
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved_stderr, 2)
            os.close(saved_stderr)
            capture.seek(0)
            kept = without_noise(capture.read().decode("utf-8", errors="replace"))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()


def without_lines(text, patterns):
    """`text` without the lines that match (`re.search`) any of `patterns`."""
    return "".join(line for line in text.splitlines(keepends=True)
                   if not any(pattern.search(line.rstrip("\n")) for pattern in patterns))


def lines_dropped(*patterns):
    """A block whose standard error is kept but for the lines that match any of `patterns`."""
    return stderr_filtered(lambda text: without_lines(text, patterns))


class _MessageFilter(logging.Filter):
    """Lets through the log records whose message does not match `pattern`."""

    def __init__(self, pattern):
        super().__init__()
        self.pattern = pattern

    def filter(self, record):
        return not self.pattern.search(record.getMessage())


@contextlib.contextmanager
def absl_log_dropped(pattern):
    """A block in which absl's Python logger, which TensorFlow's SavedModel loader logs
    through, drops the messages matching `pattern`, wherever its handlers write."""
    message_filter = _MessageFilter(pattern)
    logger = logging.getLogger("absl")
    logger.addFilter(message_filter)
    try:
        yield
    finally:
        logger.removeFilter(message_filter)
