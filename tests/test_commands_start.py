"""Each command started as a user starts it, in a process of its own: through absl and the one
error handler to a one-line usage error, with no traceback and no TensorFlow start-up noise.
(The other command tests run `main` in-process; the trainer, datagen, decoder, avg_checkpoints,
serve and bench have further subprocess tests of their own.) Last, what `entry_point.run` does
before a command's main."""

import json

import pytest

from conftest import HANG_GUARD_S, run_module_in_subprocess
from t2t_repro.tables import parameter_counts
from test_paper import base_formula


@pytest.mark.parametrize("command, missing", [
    ("t2t_repro.exporter", "--output_dir"),
    ("t2t_repro.export_ctranslate2", "--output_dir"),
    ("t2t_repro.visualize", "--inputs, --plot_dir"),
    ("t2t_repro.bleu", "--translation, --reference"),
])
def test_a_command_without_its_flags_names_them_in_one_line(command, missing):
    result = run_module_in_subprocess(command)
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: missing {missing};")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("command, shared, own", [
    ("t2t_repro.datagen", ["--problem", "--data_dir", "--tmp_dir", "--data_hparams",
                           "--[no]download", "--t2t_usr_dir"], []),
    ("t2t_repro.import_model", ["--output_dir", "--problem", "--data_dir"],
     ["--format", "--checkpoint", "--num_heads"]),
])
def test_helpshort_lists_the_flags_other_modules_define_beside_the_commands_own(
        command, shared, own):
    """absl's --helpshort lists the main module's flags alone: datagen, whose flags all live in
    t2t_repro.cli, listed none."""
    result = run_module_in_subprocess(command, "--helpshort")
    listed = {line.split(":")[0].strip() for line in result.stdout.splitlines()
              if line.startswith("  --")}
    assert set(shared + own) <= listed, result.stdout


@pytest.mark.parametrize("flag, message", [
    ("--batch_size=0", "flag --batch_size=0: 0 is not a positive integer"),
    ("--bach_size=4", "Unknown command line flag 'bach_size'. Did you mean: batch_size ?"),
])
def test_a_flag_absl_cannot_read_is_a_one_line_error(flag, message):
    """Reported as every other mistake is, where absl prints two lines beginning "FATAL"."""
    result = run_module_in_subprocess("t2t_repro.query", flag)
    assert result.returncode == 1
    assert result.stderr == f"error: {message} (see --helpshort)\n"


def test_query_with_a_positional_argument_is_a_one_line_error():
    result = run_module_in_subprocess("t2t_repro.query", "hello")
    assert result.returncode == 1
    assert result.stderr == ("error: unexpected arguments ['hello']; flags look like "
                             "--name=value.\n")


@pytest.mark.parametrize("lines, message", [
    (b"--server=http://127.0.0.1:1\nhello\n",
     "unexpected arguments ['hello']; flags look like --name=value ({flagfile} has 'hello' on a "
     "line: make it a flag, or a comment with #)."),
    (b"# a run's flags\n--cloud_mlengine=false\n",
     "Unknown command line flag 'cloud_mlengine' (see --helpshort); {flagfile} gives it: remove "
     "that line"),
    (b"--model_name=caf\xe9\n",
     "a --flagfile ({flagfile}) is not UTF-8 text ('utf-8' codec can't decode byte 0xe9 in "
     "position 16: invalid continuation byte); save it as UTF-8."),
])
def test_a_flagfile_line_a_command_cannot_read_is_an_error_naming_the_file(
        tmp_path, lines, message):
    """A run's flags.txt edited by hand, or naming a flag a later version removed."""
    flagfile = tmp_path / "flags.txt"
    flagfile.write_bytes(lines)
    result = run_module_in_subprocess("t2t_repro.query", f"--flagfile={flagfile}")
    assert result.returncode == 1
    assert result.stderr == f"error: {message.format(flagfile=flagfile)}\n"


def test_a_tensorflow_command_runs_keras_on_tensorflow_whatever_backend_is_set(tmp_path):
    """KERAS_BACKEND=jax, as set for the trainer: Keras, loaded by TensorFlow's import, would
    start on JAX half-way and the command fail at its first layer (here, Table 3's models); it
    runs on TensorFlow and says so, whether the variable or keras.json names the backend."""
    (tmp_path / "keras.json").write_text('{"backend": "jax"}')
    command = ["t2t_repro.paper", "table3", "--format", "json", "--rows", "transformer_base"]
    # An empty KERAS_BACKEND counts as unset, for Keras as here.
    for environment in ({"KERAS_BACKEND": "jax"},
                        {"KERAS_BACKEND": "", "KERAS_HOME": str(tmp_path)}):
        result = run_module_in_subprocess(*command, **environment)
        assert result.returncode == 0, result.stderr
        assert result.stderr == ("note: Keras's backend jax is for the trainer; this command "
                                 "runs Keras on TensorFlow.\n")
        [row] = json.loads(result.stdout)["rows"]
        assert row["params"] == base_formula(parameter_counts.DEFAULT_VOCAB_SIZE)


def test_a_command_runs_with_what_its_imports_made_frozen(monkeypatch):
    """`entry_point.run` moves the objects made so far (here, as in a command, TensorFlow's and
    Keras's) out of the garbage collector's full passes before absl runs the command's main."""
    import gc

    import keras  # noqa: F401 - imported, as by every command
    from absl import app

    from t2t_repro.cli import entry_point

    frozen_when_absl_starts = []
    monkeypatch.setattr(app, "run", lambda main, **options: frozen_when_absl_starts.append(
        gc.get_freeze_count()))
    gc.unfreeze()
    try:
        entry_point.run(lambda argv: None)
    finally:
        gc.freeze()  # as conftest left this worker
    assert frozen_when_absl_starts[0] > 100_000


@pytest.mark.parametrize("signal_name, said, status", [("SIGINT", "interrupted", 130),
                                                        ("SIGTERM", "terminated", 143)])
def test_ctrl_c_and_sigterm_stop_a_command_with_one_line_and_the_shells_status(
        signal_name, said, status):
    """A command that receives the signal while it runs (here sent by itself) stops through
    the same one-line report, whatever was running: not killed with nothing said."""
    import subprocess
    import sys

    script = (
        "import os, signal\n"
        "from t2t_repro.cli import entry_point\n"
        "def main(argv):\n"
        f"    os.kill(os.getpid(), signal.{signal_name})\n"
        "    signal.pause()  # not reached: the signal is handled as os.kill returns\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)  # not ignored in a job\n"
        "entry_point.run(main)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=HANG_GUARD_S)
    assert (result.returncode, result.stderr) == (status, f"{said}\n")
