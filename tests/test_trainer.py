"""The trainer's command line, run as a user runs it: `python -m t2t_repro.trainer ...`."""

import json
import os
import re
import subprocess
import sys
import time

import pytest
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.compat.proto import event_pb2

from conftest import (HANG_GUARD_S, NUMPY_OUT_OF_MEMORY, allocate_unaddressable,
                      attention_image_steps, run_module, run_module_in_subprocess)
from t2t_repro import registry
from t2t_repro.cli import usr_dir as usr_dir_lib
from t2t_repro.training import checkpoints

# One layer: these tests check the command's mechanics, which do not depend on depth, and a
# one-layer model traces its train step in half the time of two.
TINY_HPARAMS = "--hparams=batch_size=256,max_length=24,num_hidden_layers=1"
TINY_RUN = [
    "--problem=algorithmic_copy",
    "--hparams_set=transformer_tiny",
    TINY_HPARAMS,
    "--eval_steps=2",
    "--eval_decode_examples=0",  # no beam search (its compilation is most of a tiny run)
    "--log_every=5",
]


def run_trainer(*args):
    return run_module("t2t_repro.trainer", *args)


def run_trainer_in_subprocess(*args):
    """For a --t2t_usr_dir, whose imports and registrations would outlive an in-process run."""
    return run_module_in_subprocess("t2t_repro.trainer", *args)


@pytest.mark.parametrize(
    "bad_flag, named, listed",
    [
        ("--problem=nope", "problem 'nope'", ["algorithmic_copy", "algorithmic_reverse"]),
        ("--hparams_set=nope", "hparams set 'nope'", ["transformer_base", "transformer_big"]),
        ("--hparams=nope=1", "hparam 'nope'", ["num_heads", "hidden_size", "label_smoothing"]),
    ],
)
def test_unknown_names_exit_nonzero_listing_the_valid_choices(tmp_path, bad_flag, named, listed):
    """Each bad name fails before any work, names itself and lists what is registered."""
    good = {
        "--problem": "--problem=algorithmic_copy",
        "--hparams_set": "--hparams_set=transformer_tiny",
        "--hparams": "--hparams=",
    }
    good[bad_flag.split("=")[0]] = bad_flag
    result = run_trainer(*good.values(), f"--output_dir={tmp_path / 'run'}")
    assert result.returncode != 0
    assert named in result.stderr
    for name in listed:
        assert name in result.stderr
    assert not os.path.exists(tmp_path / "run" / "hparams.json")


def test_missing_required_flags_are_named():
    result = run_trainer("--problem=algorithmic_copy")
    assert result.returncode != 0
    assert "--hparams_set" in result.stderr and "--output_dir" in result.stderr


def test_registry_help_lists_every_registered_name():
    result = run_trainer("--registry_help")
    assert result.returncode == 0, result.stderr
    registry.import_all()
    for reg in (registry.problems, registry.hparams_sets, registry.models):
        for name in reg.names():
            assert f"  {name}\n" in result.stdout


def test_run_writes_its_config_resumes_from_flagfile_and_refuses_other_hparams(tmp_path,
                                                                               monkeypatch):
    """A run saves hparams.json and flags.txt, paths given relative recorded absolute;
    `--flagfile` reloads it from any folder and continues from the saved step; resuming with
    different hparams or another problem is refused and leaves the saved files alone."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    output_dir = work / "run"
    monkeypatch.chdir(work)
    first = run_trainer(*TINY_RUN, "--output_dir=run", "--data_dir=data", "--train_steps=10")
    assert first.returncode == 0, first.stderr
    assert (output_dir / "ckpt-10.weights.h5").exists()

    saved_hparams = json.loads((output_dir / "hparams.json").read_text())
    assert saved_hparams["batch_size"] == 256 and saved_hparams["hidden_size"] == 64
    flags_lines = (output_dir / "flags.txt").read_text().splitlines()
    assert "--problem=algorithmic_copy" in flags_lines
    assert TINY_HPARAMS in flags_lines
    assert f"--output_dir={output_dir}" in flags_lines
    assert f"--data_dir={work / 'data'}" in flags_lines
    assert all(line.startswith("--") for line in flags_lines)

    monkeypatch.chdir(elsewhere)  # the record, not the working folder, says where the run is
    resumed = run_trainer(f"--flagfile={output_dir / 'flags.txt'}", "--train_steps=15")
    assert resumed.returncode == 0, resumed.stderr
    assert "Resumed from" in resumed.stdout and "at step 10" in resumed.stdout
    assert (output_dir / "ckpt-15.weights.h5").exists()
    # TensorBoard drops what a killed run logged after step 10 (summaries.ScalarWriter).
    starts = [event.step for path in sorted((output_dir / "train").iterdir())
              for event in EventFileLoader(str(path)).Load()
              if event.session_log.status == event_pb2.SessionLog.START]
    assert starts == [11]

    # Evaluating the run later, or asking for no more steps than it has, leaves its flags.txt
    # as the record of how it trains.
    flags_before = (output_dir / "flags.txt").read_text()
    nothing_to_do = run_trainer(*TINY_RUN, f"--output_dir={output_dir}", "--train_steps=12")
    assert nothing_to_do.returncode == 0, nothing_to_do.stderr
    assert "Already trained 15 of 12 steps; nothing to do." in nothing_to_do.stdout
    assert (output_dir / "flags.txt").read_text() == flags_before
    evaluated = run_trainer(*TINY_RUN, f"--output_dir={output_dir}", "--schedule=evaluate",
                            "--eval_decode_examples=4",  # a few show that beam search runs
                            "--decode_examples=7")  # and then greedy decoding, 5 shown
    assert evaluated.returncode == 0, evaluated.stderr
    assert "eval at step 15 |" in evaluated.stdout and "exact_match" in evaluated.stdout
    assert evaluated.stdout.count("\n  input:  ") == 5
    assert re.search(r"^Greedy decoding: [0-7]/7 held-out sequences exactly right ",
                     evaluated.stdout, re.MULTILINE)
    assert (output_dir / "flags.txt").read_text() == flags_before
    assert attention_image_steps(output_dir)[-1] == 15  # TensorBoard's attention pictures

    hparams_before = (output_dir / "hparams.json").read_text()
    refused = run_trainer(
        "--problem=algorithmic_copy",
        "--hparams_set=transformer_tiny",
        "--hparams=batch_size=512,max_length=24,num_hidden_layers=1",
        f"--output_dir={output_dir}",
        "--train_steps=20",
    )
    assert refused.returncode != 0
    assert refused.stderr.splitlines() == [
        f"error: {output_dir} holds a run trained with other hparams: batch_size=512 (the "
        f"run's 256). Use the same hparams set and overrides (see {output_dir}/hparams.json and "
        f"flags.txt), or another output folder."]
    assert (output_dir / "hparams.json").read_text() == hparams_before
    assert not (output_dir / "ckpt-20.weights.h5").exists()

    # Nor is another problem taken up (algorithmic_reverse reads the same ids), to train or to
    # evaluate, and the run's flags.txt still records its own.
    for schedule in ("train", "evaluate"):
        other_problem = run_trainer(
            "--problem=algorithmic_reverse", *TINY_RUN[1:], f"--output_dir={output_dir}",
            "--train_steps=20", f"--schedule={schedule}")
        assert other_problem.returncode == 1 and other_problem.stderr.splitlines() == [
            f"error: --problem=algorithmic_reverse disagrees with --problem=algorithmic_copy "
            f"that {output_dir / 'flags.txt'} records for this run; resume it with "
            f"--flagfile={output_dir / 'flags.txt'}, or train algorithmic_reverse in another "
            f"--output_dir (--warm_start_from={output_dir} starts from its weights)."]
        assert (output_dir / "flags.txt").read_text() == flags_before
        assert [step for step, _ in checkpoints.list_checkpoints(output_dir)] == [10, 15]


def test_training_killed_with_sigkill_resumes_from_its_last_checkpoint(tmp_path):
    """A trainer process killed outright (no chance to clean up) leaves only whole checkpoints,
    and the same command resumes from the newest of them."""
    output_dir = tmp_path / "run"
    command = [
        sys.executable, "-m", "t2t_repro.trainer", *TINY_RUN, f"--output_dir={output_dir}",
        "--train_steps=100000", "--save_checkpoints_steps=5", "--eval_every=100000",
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while not (output_dir / "ckpt-10.weights.h5").exists():
            assert process.poll() is None, process.stderr.read().decode()
            assert time.monotonic() < deadline, "the run hung before its second checkpoint"
            time.sleep(0.2)
    finally:
        process.kill()
        process.wait()
    saved_steps = [step for step, _ in checkpoints.list_checkpoints(str(output_dir))]
    assert saved_steps and saved_steps[-1] >= 10

    resumed = run_trainer(*TINY_RUN, f"--output_dir={output_dir}",
                          f"--train_steps={saved_steps[-1] + 2}")
    assert resumed.returncode == 0, resumed.stderr
    assert f"at step {saved_steps[-1]}." in resumed.stdout
    assert (output_dir / f"ckpt-{saved_steps[-1] + 2}.weights.h5").exists()


def test_a_run_out_of_memory_says_what_to_lower_and_its_folder_takes_a_smaller_batch(
        tmp_path, monkeypatch):
    """The first step's memory cannot be had (a real allocation failure): one line says what
    to lower, and the same folder, which holds no checkpoint, then trains with a smaller
    batch."""
    output_dir = tmp_path / "run"
    hparams = "--hparams=batch_size=256,max_length=24,num_hidden_layers=1"
    with monkeypatch.context() as patched:
        patched.setattr(checkpoints, "CheckpointSchedule", allocate_unaddressable)
        failed = run_trainer(*TINY_RUN, hparams, f"--output_dir={output_dir}",
                             "--train_steps=2")
    assert failed.returncode == 1
    assert failed.stderr.splitlines()[-1] == (
        f"error: training ran out of memory ({NUMPY_OUT_OF_MEMORY}): lower batch_size in "
        f"--hparams (the tokens of a batch; gradient_accumulation_steps=K keeps the tokens of a "
        f"step), or, where an evaluation's decoding ran out, batch_size or beam_size in "
        f"--decode_hparams; no checkpoint was written yet; the same command starts the run "
        f"again.")
    assert json.loads((output_dir / "hparams.json").read_text())["batch_size"] == 256

    smaller = run_trainer(*TINY_RUN, hparams.replace("256", "128"), f"--output_dir={output_dir}",
                          "--train_steps=2")
    assert smaller.returncode == 0, smaller.stderr
    assert json.loads((output_dir / "hparams.json").read_text())["batch_size"] == 128
    assert [step for step, _ in checkpoints.list_checkpoints(output_dir)] == [2]


@pytest.mark.parametrize("environment, named", [
    ({"KERAS_BACKEND": "foo"}, "KERAS_BACKEND=foo: the trainer trains on tensorflow or jax; "),
    ({"KERAS_BACKEND": "JAX"}, "KERAS_BACKEND=JAX: the trainer trains on tensorflow or jax "
                               "(Keras spells it jax); "),
    ({"KERAS_BACKEND": "numpy"}, "KERAS_BACKEND=numpy: the trainer trains on tensorflow or "
                                 "jax; "),
    ({"KERAS_BACKEND": "torch"}, "KERAS_BACKEND=torch: the trainer trains on tensorflow or "
                                 "jax; "),
    ({"KERAS_HOME": "{home}"}, "backend 'numpy' in {home}/keras.json: the trainer trains on "
                               "tensorflow or jax; "),
])
def test_a_keras_backend_the_trainer_cannot_train_on_is_one_line_before_anything_is_written(
        tmp_path, monkeypatch, environment, named):
    (tmp_path / "keras.json").write_text('{"backend": "numpy"}')
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value.format(home=tmp_path))
    result = run_trainer(*TINY_RUN, f"--output_dir={tmp_path / 'run'}", "--train_steps=2")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"error: {named.format(home=tmp_path)}set KERAS_BACKEND=tensorflow or "
        f"KERAS_BACKEND=jax."]
    assert not (tmp_path / "run").exists()


BROKEN_SETS = '''from hparams.transformer import transformer_tiny


def raises():
    hparams = transformer_tiny()
    hparams.hidden_size = undefined_name
    return hparams


def returns_a_dict():
    return {"hidden_size": 64}


def returns_nothing():
    transformer_tiny()
'''


@pytest.mark.parametrize("name, message", [
    ("raises", "hparams set raises raised NameError: name 'undefined_name' is not defined (at "
               "{file}:6); fix the set."),
    ("returns_a_dict", "hparams set returns_a_dict ({file}:10) returned a dict, not HParams; "
                       "end it with the HParams it builds (return hparams)."),
    ("returns_nothing", "hparams set returns_nothing ({file}:14) returned None, not HParams; "
                        "end it with the HParams it builds (return hparams)."),
])
def test_an_hparams_set_that_fails_is_one_line_naming_it_and_its_line(tmp_path, monkeypatch,
                                                                      name, message):
    """A user's set (as --t2t_usr_dir registers one) that raises or returns no HParams."""
    import importlib.util

    path = tmp_path / "broken_sets.py"
    path.write_text(BROKEN_SETS)
    spec = importlib.util.spec_from_file_location("broken_sets", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(registry.hparams_sets._entries, name, getattr(module, name))
    result = run_trainer("--problem=algorithmic_copy", f"--hparams_set={name}",
                         f"--output_dir={tmp_path / 'run'}", "--train_steps=2")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [f"error: {message.format(file=path)}"]
    assert not (tmp_path / "run").exists()


USR_PROBLEM = '''
from problems.algorithmic import AlgorithmicProblem
from t2t_repro.data.problem import EVAL, TRAIN
from t2t_repro.registry import problems


@problems.register
class UsrSort(AlgorithmicProblem):
    num_symbols = 4
    max_sequence_length = 6
    num_examples = {TRAIN: 500, EVAL: 50}

    def target_of(self, sequence):
        return sorted(sequence)
'''

USR_HPARAMS = '''
from hparams.transformer import transformer_tiny
from t2t_repro.registry import hparams_sets


@hparams_sets.register
def usr_tiny():
    hparams = transformer_tiny()
    hparams.hidden_size = 32
    hparams.filter_size = 64
    hparams.num_hidden_layers = 1
    hparams.batch_size = 128
    hparams.max_length = 8
    return hparams
'''


@pytest.fixture(params=["package", "modules"])
def usr_dir(request, tmp_path):
    """A user's folder registering `usr_sort` and `usr_tiny`: a package whose __init__ imports
    its modules, or a plain folder of modules."""
    folder = tmp_path / "my_t2t_usr"
    folder.mkdir()
    (folder / "usr_problem.py").write_text(USR_PROBLEM)
    (folder / "usr_hparams.py").write_text(USR_HPARAMS)
    if request.param == "package":
        (folder / "__init__.py").write_text("from . import usr_hparams, usr_problem\n")
    return folder


def test_registry_help_lists_what_a_usr_dir_registers(usr_dir):
    result = run_trainer_in_subprocess(f"--t2t_usr_dir={usr_dir}", "--registry_help")
    assert result.returncode == 0, result.stderr
    assert "  usr_sort\n" in result.stdout and "  usr_tiny\n" in result.stdout
    assert "  algorithmic_copy\n" in result.stdout


def test_trains_a_usr_dir_problem_with_tensor2tensor_flag_names(tmp_path):
    folder = tmp_path / "my_t2t_usr"
    folder.mkdir()
    (folder / "__init__.py").write_text(USR_PROBLEM + USR_HPARAMS)
    output_dir = tmp_path / "run"
    result = run_trainer_in_subprocess(
        f"--t2t_usr_dir={folder}", "--problem=usr_sort", "--hparams_set=usr_tiny",
        f"--output_dir={output_dir}", "--train_steps=4", "--eval_steps=1",
        "--eval_decode_examples=0", "--local_eval_frequency=2", "--log_step_count_steps=2",
        "--save_checkpoints_secs=90",
    )
    assert result.returncode == 0, result.stderr
    assert "step 2/4" in result.stdout and "step 4/4" in result.stdout
    assert checkpoints.latest_checkpoint(output_dir).endswith("ckpt-4.weights.h5")
    recorded = (output_dir / "flags.txt").read_text().splitlines()
    for line in ("--eval_every=2", "--log_every=2", "--save_checkpoints_minutes=1.5",
                 f"--t2t_usr_dir={folder}"):
        assert line in recorded
    assert not any(line.startswith("--save_checkpoints_secs") for line in recorded)


def test_a_usr_dir_that_fails_to_import_is_a_one_line_error_naming_the_line(tmp_path):
    folder = tmp_path / "usr"
    folder.mkdir()
    (folder / "broken.py").write_text("import os\nundefined_name\n")
    result = run_trainer_in_subprocess(f"--t2t_usr_dir={folder}", "--registry_help")
    assert result.returncode != 0
    assert "broken.py:2: NameError" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("content, named", [
    (None, "is not a folder"),
    ({"json.py": ""}, "module name 'json' is already taken"),
    ({"notes.txt": ""}, "no __init__.py and no .py modules"),
])
def test_a_bad_usr_dir_is_refused_before_anything_is_imported(tmp_path, content, named):
    folder = tmp_path / "usr"
    if content is not None:
        folder.mkdir()
        for name, text in content.items():
            (folder / name).write_text(text)
    path_before = list(sys.path)
    with pytest.raises(usr_dir_lib.UsrDirError, match=named):
        usr_dir_lib.import_usr_dir(str(folder))
    assert sys.path == path_before


@pytest.mark.parametrize("module, args, reached", [
    ("t2t_repro.datagen", ["--data_dir={tmp}"], None),  # in-process problem: nothing to generate
    ("t2t_repro.decoder", ["--hparams_set=usr_tiny", "--output_dir={tmp}"], "no checkpoint"),
])
def test_datagen_and_decoder_find_a_usr_dir_problem(tmp_path, module, args, reached):
    folder = tmp_path / "my_t2t_usr"
    folder.mkdir()
    (folder / "__init__.py").write_text(USR_PROBLEM + USR_HPARAMS)
    result = run_module_in_subprocess(module, f"--t2t_usr_dir={folder}", "--problem=usr_sort",
                                      *(arg.format(tmp=tmp_path) for arg in args))
    assert "Unknown problem" not in result.stderr and "Traceback" not in result.stderr
    if reached is None:
        assert result.returncode == 0, result.stderr
    else:
        assert reached in result.stderr, result.stderr


@pytest.mark.parametrize("argv, steps", [
    (["--hparams_set=transformer_base"], 0),  # the paper's: every 10 minutes alone
    (["--hparams_set=transformer_base", "--save_checkpoints_steps=500"], 500),
    (["--hparams_set=transformer_base", "--save_checkpoints_minutes=0"], 1000),
    (["--hparams_set=transformer_tiny"], 1000),
])
def test_save_checkpoints_steps_defaults_to_the_hparams_sets_cadence(argv, steps):
    from absl import flags
    from absl.testing import flagsaver

    from t2t_repro import trainer

    with flagsaver.flagsaver():
        flags.FLAGS.unparse_flags()
        flags.FLAGS(["trainer", *argv])
        assert trainer.save_checkpoints_steps() == steps
