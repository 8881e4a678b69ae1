"""Entry points start without TensorFlow's C++ start-up lines that read like failures on a
machine without a GPU, and without hiding anything else printed meanwhile."""

import json
import os
import subprocess
import sys

import pytest

from conftest import run_module_in_subprocess
from t2t_repro.cli.quiet_tensorflow import without_startup_noise

ABSL_PREAMBLE = ("WARNING: All log messages before absl::InitializeLog() is called are written "
                 "to STDERR\n")
NO_DRIVER = ("I0000 00:00:1795463644.549832    6210 cudart_stub.cc:31] Could not find cuda "
             "drivers on your machine, GPU will not be used.\n")
CUINIT = ("E0000 00:00:1795463647.300213    6210 cuda_platform.cc:52] failed call to cuInit: "
          "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n")
ONEDNN_ON = ("I0000 00:00:1795534826.301340   12327 port.cc:153] oneDNN custom operations are "
             "on. You may see slightly different numerical results due to floating-point "
             "round-off errors from different computation orders. To turn them off, set the "
             "environment variable `TF_ENABLE_ONEDNN_OPTS=0`.\n")
REAL_ERROR = "E0000 00:00:1795463647.300299    6210 some_kernel.cc:12] a real failure\n"


def test_an_entry_point_prints_only_its_own_message(tmp_path):
    """avg_checkpoints imports TensorFlow, then fails on an empty run folder."""
    result = run_module_in_subprocess("t2t_repro.avg_checkpoints", f"--output_dir={tmp_path}")
    assert result.returncode != 0
    for noise in ("absl::InitializeLog", "cudart_stub", "cuInit"):
        assert noise not in result.stderr
    assert result.stderr.strip() == f"error: No checkpoints (ckpt-<step>.weights.h5) in {tmp_path}."


def test_a_benchmarked_decoders_own_process_starts_quietly(tmp_path, capfd):
    """`bench decode` runs our decoder in a spawned process of its own, which imports
    TensorFlow as the commands do; here it then fails on an empty work folder."""
    from t2t_repro.bench.decode import Contender, decode_in_own_process
    from t2t_repro.data.problem import ProblemDataError

    with pytest.raises(ProblemDataError, match="No translate_ende data"):
        decode_in_own_process(Contender("t2t_repro"), str(tmp_path), [])
    stderr = capfd.readouterr().err
    for noise in ("absl::InitializeLog", "cudart_stub", "cuInit"):
        assert noise not in stderr


def test_other_lines_written_to_file_descriptor_2_meanwhile_still_show():
    code = (
        "import os\n"
        "from t2t_repro.cli.quiet_tensorflow import startup_noise_filtered\n"
        "with startup_noise_filtered():\n"
        f"    os.write(2, {(ABSL_PREAMBLE + NO_DRIVER + REAL_ERROR + CUINIT).encode()!r})\n"
        "    print('from python', file=__import__('sys').stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stderr == REAL_ERROR + "from python\n"


def test_a_failed_cuinit_shows_when_a_cuda_driver_is_installed():
    """Only with no driver at all is the failure expected; with one, it is a real problem."""
    assert without_startup_noise(ABSL_PREAMBLE + CUINIT + REAL_ERROR) == CUINIT + REAL_ERROR
    assert without_startup_noise(ABSL_PREAMBLE + NO_DRIVER + CUINIT) == ""


def after_import(environment, collection_enabled=True):
    """In a process that started with `environment` (and automatic garbage collection on or
    off) and imported TensorFlow as the commands do: whether oneDNN is on, which optional
    imports TensorFlow's import left in sys.modules, and whether they import afterwards;
    whether collection is on, how many objects the import froze, how many were collectable
    (imported or made since) when the call was made again, and how many more are frozen after
    it (frozen objects that die leave the count, so none frozen shows as 0 or less)."""
    code = ("import gc, json, sys\n"
            f"{'' if collection_enabled else 'gc.disable()'}\n"
            "from t2t_repro.cli.quiet_tensorflow import import_tensorflow\n"
            "import_tensorflow()\n"
            "frozen = gc.get_freeze_count()\n"
            "from tensorflow.python.util import _pywrap_util_port\n"
            "left = sorted(name for name in ('jax', 'matplotlib') if name in sys.modules)\n"
            "import jax.numpy, matplotlib.pyplot\n"
            "collectable = len(gc.get_objects())\n"
            "import_tensorflow()\n"
            "print(json.dumps({'onednn': _pywrap_util_port.IsMklEnabled(), 'left': left,\n"
            "                  'jax_sum': float(jax.numpy.arange(4).sum()),\n"
            "                  'pyplot': matplotlib.pyplot.__name__,\n"
            "                  'collection_enabled': gc.isenabled(), 'frozen': frozen,\n"
            "                  'collectable': collectable,\n"
            "                  'frozen_again': gc.get_freeze_count() - frozen}))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=environment)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def environment_without_onednn_setting():
    return {name: value for name, value in os.environ.items()
            if name != "TF_ENABLE_ONEDNN_OPTS"}


@pytest.fixture(scope="module")
def default_import(environment_without_onednn_setting):
    return after_import(environment_without_onednn_setting)


@pytest.fixture(scope="module")
def import_told_otherwise(environment_without_onednn_setting):
    """The import in a process told to leave oneDNN off, whose garbage collection is off."""
    return after_import(dict(environment_without_onednn_setting, TF_ENABLE_ONEDNN_OPTS="0"),
                        collection_enabled=False)


def test_the_commands_turn_onednn_on_on_any_cpu_unless_told_otherwise(
        default_import, import_told_otherwise):
    """TensorFlow's own default leaves it off on CPUs without AVX-512."""
    assert default_import["onednn"] is True
    assert import_told_otherwise["onednn"] is False


def test_tensorflow_is_imported_without_jax_and_matplotlib_which_import_afterwards(
        default_import):
    assert default_import["left"] == []
    assert default_import["jax_sum"] == 6.0
    assert default_import["pyplot"] == "matplotlib.pyplot"


def test_the_first_import_freezes_its_objects_and_collection_resumes_as_it_was(
        default_import, import_told_otherwise):
    """TensorFlow's import makes some 450,000 objects; frozen, no later collection walks them.
    A second call (TensorFlow already there) freezes nothing: a test or a notebook that calls
    it keeps its own objects collectable. Collection that was off stays off."""
    assert default_import["collection_enabled"] is True
    assert default_import["frozen"] > 100_000
    assert default_import["collectable"] > 10_000
    assert default_import["frozen_again"] <= 0
    assert import_told_otherwise["collection_enabled"] is False
    assert import_told_otherwise["frozen"] > 100_000


def test_the_onednn_notice_is_noise():
    assert without_startup_noise(ONEDNN_ON + REAL_ERROR + ONEDNN_ON) == REAL_ERROR
