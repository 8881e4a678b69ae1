"""The trainer under faults: kills at seeded random steps (one mid-checkpoint), corrupt run files,
and flag values that make no sense, each ending in a resumable run or a one-line error that
leaves the output folder as it was."""

import contextlib
import json
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import time

import h5py
import pytest

from conftest import HANG_GUARD_S, read_only_folder
from t2t_repro.training import checkpoints
from test_trainer import TINY_RUN, run_trainer

# The trainer tests' tiny run, checkpointing often: each kill lands where the trainer stopped
# itself (stopping_trainer.py), so neither the model's size nor the machine's speed decides where.
KILL_RUN = [*TINY_RUN, "--eval_every=100000", "--save_checkpoints_steps=3",
            "--keep_checkpoint_max=3", "--train_steps=30"]


STOPPING_TRAINER = pathlib.Path(__file__).parent / "training" / "stopping_trainer.py"


def start_trainer(output_dir, log_path, temp_dir=None, **stop_at):
    """The trainer in the background, stopping itself at `stop_at` (T2T_TEST_STOP_* variables,
    see stopping_trainer.py) to wait for its kill. `temp_dir`: its temporary folder (TMPDIR)."""
    log = open(log_path, "w")
    command = [sys.executable, "-u", str(STOPPING_TRAINER)]
    stop_variables = {f"T2T_TEST_STOP_{name.upper()}": str(value)
                      for name, value in stop_at.items()}
    return subprocess.Popen(
        [*command, *KILL_RUN, f"--output_dir={output_dir}"], stdout=log,
        stderr=subprocess.STDOUT, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **stop_variables,
                                           **({"TMPDIR": str(temp_dir)} if temp_dir else {})))


def wait_until_stopped(process, log_path, seconds=600):
    """Waits for `process` to stop itself (SIGSTOP); fails if it exits instead."""
    deadline = time.monotonic() + seconds
    while True:
        pid, status = os.waitpid(process.pid, os.WUNTRACED | os.WNOHANG)
        if pid and os.WIFSTOPPED(status):
            return
        assert not pid, f"the trainer ended before its stop point:\n{open(log_path).read()}"
        assert time.monotonic() < deadline, "the trainer never reached its stop point"
        time.sleep(0.05)


def partial_files(directory):
    return [name for name in os.listdir(directory) if checkpoints.is_partial_checkpoint(name)]


def complete_steps_that_load(directory):
    """Steps of the complete checkpoints, each opened and read in full."""
    steps = []
    for step, path in checkpoints.list_checkpoints(directory):
        with h5py.File(path, "r") as f:
            f.visititems(lambda name, item: item[()] if isinstance(item, h5py.Dataset) else None)
        steps.append(step)
    return steps


def resumed_step(log):
    match = re.search(r"Resumed from \S+ at step (\d+)\.", log)
    return int(match.group(1)) if match else 0


def test_five_kills_one_mid_checkpoint_each_resume_from_the_newest_complete_checkpoint(
        tmp_path):
    """SIGKILL five times during one 30-step run (checkpoints every 3 steps): after a seeded
    random step past each attempt's first new checkpoint, and the third time while a checkpoint
    is being written. The trainer stops itself at each of those points and is killed there, so
    the kills land at the same steps on any machine. Every restart resumes from the newest
    complete checkpoint and removes the partial file, and the last run ends at step 30 with a
    loadable checkpoint. No killed attempt leaves a file in its temporary folder (autograph
    writes each function it converts to one there, removed only at a normal exit)."""
    rng = random.Random(14)
    output_dir = str(tmp_path / "run")
    temp_dir = tmp_path / "tmp"
    temp_dir.mkdir()
    history = []
    for kill in range(5):
        log_path = tmp_path / f"attempt-{kill}.log"
        newest_before = max(complete_steps_that_load(output_dir), default=0) if kill else 0
        if kill == 2:  # inside a checkpoint write, once the restart has cleaned up
            stop_at = {"in_checkpoint_write": 1}
        else:  # 0 to 2 steps after this attempt's first new checkpoint
            stop_at = {"after_step": newest_before + 3 + rng.randrange(3)}
        process = start_trainer(output_dir, log_path, temp_dir, **stop_at)
        try:
            wait_until_stopped(process, log_path)
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait()
        assert resumed_step(log_path.read_text()) == newest_before
        steps = complete_steps_that_load(output_dir)
        history.append({"kill": kill + 1, "stopped": stop_at, "resumed_from": newest_before,
                        "complete": steps, "partial_left": bool(partial_files(output_dir))})
        if kill != 2:
            assert steps[-1] == newest_before + 3  # the attempt's new checkpoint is complete
    assert history[2]["partial_left"]  # the kill did land inside a write
    assert history[2]["complete"] == history[1]["complete"]  # which never completed
    assert sorted(os.listdir(temp_dir)) == []
    final = run_trainer(*KILL_RUN, f"--output_dir={output_dir}")  # in this process: no kill
    assert final.returncode == 0, final.stderr[-3000:]
    assert resumed_step(final.stdout) == max(history[-1]["complete"], default=0)
    assert not partial_files(output_dir)
    assert complete_steps_that_load(output_dir)[-1] == 30
    print(json.dumps(history))  # the kill log: `pytest -s` shows it


@pytest.mark.parametrize("flag, named", [
    ("--eval_every=0", "--eval_every=0"),
    ("--log_every=-5", "--log_every=-5"),
    ("--train_steps=-1", "--train_steps=-1"),
    ("--save_checkpoints_steps=-2", "--save_checkpoints_steps=-2"),
    ("--keep_checkpoint_max=0", "--keep_checkpoint_max=0"),
    ("--schedule=evaluate", "has no checkpoint"),
    ("--hparams=batch_size=256,max_length=24,dtype_policy=mixed_fp8", "dtype_policy"),
    ("--hparams=batch_size=256,max_length=24,loss_chunk_tokens=0", "loss_chunk_tokens"),
    ("--hparams=batch_size=256,max_length=24,gradient_accumulation_steps=0",
     "hparam gradient_accumulation_steps=0 must be at least 1."),
    ("--hparams=batch_size=0,max_length=24", "hparam batch_size=0 must be at least 1."),
    ("--hparams=batch_size=10,max_length=24",
     "hparam batch_size=10 is below max_length=24 × 1 replica(s)"),
    ("--hparams=batch_size=256,max_length=1",  # every example: 1 to 20 symbols and EOS
     "max_length=1 leaves out every train example of algorithmic_copy: they are 2 to 21"),
    ("--train_steps=0", "--train_steps=0 makes no sense: it must be at least 1"),
    ("--eval_early_stopping_metric_delta=nan",
     "--eval_early_stopping_metric_delta=nan makes no sense: give a finite number."),
    ("--save_checkpoints_minutes=nan",
     "--save_checkpoints_minutes=nan makes no sense: give a finite number."),
    ("--peak_tflops=inf", "--peak_tflops=inf makes no sense: give a finite number."),
    ("--random_seed=-1", "flag --random_seed=-1: -1 is not"),
    ("--random_seed=4294967296", "flag --random_seed=4294967296: 4294967296 is not"),
    ("--decode_examples=-3", "flag --decode_examples=-3: -3 is not"),
    # Model hparams no Transformer is built with (transformer_tiny: d_model 64, 4 heads).
    ("--hparams=batch_size=256,max_length=24,hidden_size=0",
     "hparam hidden_size=0 must be at least 1."),
    ("--hparams=batch_size=256,max_length=24,num_encoder_layers=-1",
     "hparam num_encoder_layers=-1 must be at least 0 (0: num_hidden_layers)."),
    ("--hparams=batch_size=256,max_length=24,num_heads=3",
     "hparam num_heads=3 does not divide the 64 key channels"),
    ("--hparams=batch_size=256,max_length=24,attention_value_channels=66",
     "hparam num_heads=4 does not divide the 66 value channels"),
    ("--hparams=batch_size=256,max_length=24,relu_dropout=1.0",
     "hparam relu_dropout=1.0 must be at least 0 and below 1."),
    ("--hparams=batch_size=256,max_length=24,packed=true,self_attention_window=4",
     "Packed rows need full self-attention: hparam packed=true does not combine with "
     "self_attention_window > 0."),
    ("--hparams=batch_size=256,max_length=24,ffn_activation=tanh",
     "hparam ffn_activation='tanh' must be one of relu, swish, gelu, gelu_sigmoid."),
    # Optimisation hparams out of their ranges.
    ("--hparams=batch_size=256,max_length=24,learning_rate_constant=-1.0",
     "hparam learning_rate_constant=-1.0 must be above 0."),
    ("--hparams=batch_size=256,max_length=24,learning_rate_warmup_steps=-5",
     "hparam learning_rate_warmup_steps=-5 must be at least 0."),
    ("--hparams=batch_size=256,max_length=24,label_smoothing=1.5",
     "hparam label_smoothing=1.5 must be at least 0 and below 1."),
    ("--hparams=batch_size=256,max_length=24,optimizer_adam_beta2=1.0",
     "hparam optimizer_adam_beta2=1.0 must be at least 0 and below 1."),
    ("--hparams=batch_size=256,max_length=24,clip_grad_norm=-1.0",
     "hparam clip_grad_norm=-1.0 must be at least 0 (0: no clipping)."),
    ("--hparams=batch_size=256,max_length=24,learning_rate_schedule=constant*cosine",
     "hparam learning_rate_schedule names unknown factor(s) ['cosine']"),
])
def test_senseless_flag_values_are_errors_that_write_nothing(tmp_path, flag, named):
    output_dir = tmp_path / "run"
    result = run_trainer(*TINY_RUN, f"--output_dir={output_dir}", "--train_steps=2", flag)
    assert result.returncode != 0
    assert named in result.stderr and "Traceback" not in result.stderr
    assert not output_dir.exists() or not os.listdir(output_dir)


@pytest.mark.parametrize("content, named", [
    ('{"hidden_size": 32, "num_hea', "Unterminated string"),  # cut short mid-write
    ("[1, 2]", "not an object"),
    ('{"hidden_size": {"wide": 1}}', "hidden_size"),
])
def test_a_corrupt_hparams_file_is_a_clear_error(tmp_path, content, named):
    output_dir = tmp_path / "run"
    output_dir.mkdir()
    (output_dir / "hparams.json").write_text(content)
    result = run_trainer(*TINY_RUN, f"--output_dir={output_dir}", "--train_steps=2")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "hparams.json is not a readable hparams file" in result.stderr and named in result.stderr
    assert (output_dir / "hparams.json").read_text() == content  # nothing overwritten


def test_an_averaged_folder_is_refused_as_a_training_output_dir(tmp_path):
    run_dir, averaged = tmp_path / "run", tmp_path / "run" / "averaged"
    trained = run_trainer(*TINY_RUN, f"--output_dir={run_dir}", "--train_steps=2",
                          "--eval_every=100")
    assert trained.returncode == 0, trained.stderr
    from conftest import run_module

    assert run_module("t2t_repro.avg_checkpoints", f"--output_dir={run_dir}",
                      "--n=1").returncode == 0
    before = sorted(os.listdir(averaged))
    refused = run_trainer(*TINY_RUN, f"--output_dir={averaged}", "--train_steps=4")
    assert refused.returncode != 0 and "averaged checkpoints of" in refused.stderr
    assert str(run_dir) in refused.stderr
    assert sorted(os.listdir(averaged)) == before


def folder_contents(directory):
    """{path under `directory`: its bytes} of every file there."""
    return {str(path.relative_to(directory)): path.read_bytes()
            for path in sorted(directory.rglob("*")) if path.is_file()}


def error_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def test_a_second_trainer_is_refused_and_an_interrupted_trainers_folder_is_free_at_once(
        tmp_path):
    """A trainer stopped after step 3 holds its folder: a second one (another seed) is refused
    with one line naming the folder and the first's pid, and changes nothing there; the first,
    continued, writes its own next checkpoint. Stopped after step 6 as a scheduler does
    (SIGTERM; Ctrl-C's SIGINT takes the same path), it says in one line where the run resumes,
    exits with status 143 and leaves a folder that a new trainer takes at once, resuming from
    step 6. (A SIGKILLed trainer's folder is taken at
    once by every restart of the five-kills test.)"""
    output_dir, log_path = tmp_path / "run", tmp_path / "first.log"
    first = start_trainer(output_dir, log_path, after_step="3,6")
    try:
        wait_until_stopped(first, log_path)
        before = folder_contents(output_dir)
        second = run_trainer(*KILL_RUN, f"--output_dir={output_dir}", "--random_seed=2")
        assert folder_contents(output_dir) == before
        first.send_signal(signal.SIGCONT)
        wait_until_stopped(first, log_path)
        first.send_signal(signal.SIGTERM)  # handled once the process runs again
        first.send_signal(signal.SIGCONT)
        first.wait(timeout=HANG_GUARD_S)
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGKILL)
            first.wait()
    assert second.returncode == 1 and "Traceback" not in second.stderr, second.stderr
    [error] = error_lines(second.stderr)
    assert f"--output_dir={output_dir} is in use by another trainer (pid {first.pid})" in error
    assert [step for step, _ in checkpoints.list_checkpoints(str(output_dir))] == [3, 6]
    assert "--random_seed" not in (output_dir / "flags.txt").read_text()
    log = log_path.read_text()
    assert first.returncode == 143 and "Traceback" not in log, log[-3000:]
    assert log.splitlines()[-1] == (f"terminated: the same command resumes the run from "
                                    f"{output_dir}/ckpt-6.weights.h5.")

    third = run_trainer(*KILL_RUN, f"--output_dir={output_dir}")
    assert third.returncode == 0, third.stderr
    assert re.search(r"Resumed from \S+ckpt-6\.weights\.h5 at step 6\.", third.stdout)
    assert checkpoints.checkpoint_step(checkpoints.latest_checkpoint(str(output_dir))) == 30


@pytest.mark.parametrize("case, named", [
    ("file", "is a file, not a folder"),
    ("under_file", "cannot be created: {file} is a file, not a folder"),
    ("read_only", "cannot be written: {read_only} is read-only"),
])
def test_an_output_dir_that_cannot_be_written_is_a_one_line_error_before_any_work(
        tmp_path, case, named):
    file = tmp_path / "file"
    file.write_text("not a folder\n")
    with contextlib.ExitStack() as stack:
        read_only = stack.enter_context(read_only_folder(tmp_path / "read_only"))
        output_dir = {"file": file, "under_file": file / "run",
                      "read_only": read_only / "run"}[case]
        result = run_trainer(*TINY_RUN, f"--output_dir={output_dir}", "--train_steps=2")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    [error] = error_lines(result.stderr)
    message = named.format(file=file, read_only=read_only)
    assert error.startswith(f"error: --output_dir={output_dir} {message.split(':')[0]}")
    assert message in error
    assert sorted(os.listdir(tmp_path)) == ["file", "read_only"]
    assert not os.listdir(read_only) and file.read_text() == "not a folder\n"
