"""Known notices kept off standard error, everything else printed meanwhile kept."""

import logging
import subprocess
import sys

from t2t_repro.utils.stderr_lines import UNSAVED_CUSTOM_GRADIENTS, absl_log_dropped

NORMALIZATION_NOTICE = ("normalizer.cc(51) LOG(INFO) precompiled_charsmap is empty. use identity "
                        "normalization.\n")
CUSTOM_GRADIENTS_WARNING = ("Importing a function (__inference__beams_6617) with ops with "
                            "unsaved custom gradients. Will likely fail if a gradient is "
                            "requested.")
REAL_ERROR = "E0000 00:00:1795463647.300299    6210 some_kernel.cc:12] a real failure\n"


def test_a_known_line_written_to_file_descriptor_2_is_dropped_and_the_rest_kept():
    written = (NORMALIZATION_NOTICE + REAL_ERROR + NORMALIZATION_NOTICE).encode()
    code = (
        "import os, sys\n"
        "from t2t_repro.utils.stderr_lines import SENTENCEPIECE_IDENTITY_NORMALIZATION, "
        "lines_dropped\n"
        "with lines_dropped(SENTENCEPIECE_IDENTITY_NORMALIZATION):\n"
        f"    os.write(2, {written!r})\n"
        "    print('from python', file=sys.stderr)\n"
        f"os.write(2, {NORMALIZATION_NOTICE.encode()!r})\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stderr == REAL_ERROR + "from python\n" + NORMALIZATION_NOTICE


def test_absls_logger_drops_a_known_message_only_inside_the_block(caplog):
    logger = logging.getLogger("absl")
    with caplog.at_level(logging.WARNING, logger="absl"):
        with absl_log_dropped(UNSAVED_CUSTOM_GRADIENTS):
            logger.warning(CUSTOM_GRADIENTS_WARNING)
            logger.warning("a real warning")
        logger.warning(CUSTOM_GRADIENTS_WARNING)
    assert [record.getMessage() for record in caplog.records] == [
        "a real warning", CUSTOM_GRADIENTS_WARNING]
