"""`python -m t2t_repro.avg_checkpoints` on a tiny trainer run, as a user runs it."""

import hashlib
import json
import os
import re
import shutil

import h5py
import keras
import numpy as np
import pytest

from conftest import run_module
from t2t_repro import hparams as hparams_lib
from t2t_repro import registry
from t2t_repro.training.checkpoints import CheckpointManager
from t2t_repro.training.run import build_model, compile_for_training

TINY_RUN = [
    "--problem=algorithmic_reverse",
    "--hparams_set=transformer_tiny",
    "--hparams=batch_size=128,max_length=24,hidden_size=32,filter_size=64,num_hidden_layers=1",
    "--eval_steps=1",
    "--log_every=100",
]
CHECKPOINT_NAMES = ["ckpt-2.weights.h5", "ckpt-4.weights.h5", "ckpt-6.weights.h5"]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A 6-step run checkpointed every 2 steps: ckpt-2, ckpt-4, ckpt-6."""
    output_dir = tmp_path_factory.mktemp("avg") / "run"
    result = run_module("t2t_repro.trainer", *TINY_RUN, f"--output_dir={output_dir}",
                        "--train_steps=6", "--save_checkpoints_steps=2", "--schedule=train")
    assert result.returncode == 0, result.stderr
    assert sorted(name for name in os.listdir(output_dir) if name.endswith(".h5")) == \
        CHECKPOINT_NAMES
    return output_dir


def model_restored_from(output_dir):
    """The run's model built from `output_dir`'s hparams.json and restored from its latest
    checkpoint, as a decoder given `--output_dir` would build it."""
    registry.import_all()
    hparams = hparams_lib.load(str(output_dir))
    problem = registry.problems["algorithmic_reverse"]()
    model = compile_for_training(build_model("transformer", hparams, problem), hparams)
    assert CheckpointManager(str(output_dir), model).restore() == 6
    return model


def average(*args):
    return run_module("t2t_repro.avg_checkpoints", *args)


def digests(directory):
    """{name: sha256} of the files directly in `directory`."""
    return {
        name: hashlib.sha256((directory / name).read_bytes()).hexdigest()
        for name in os.listdir(directory) if (directory / name).is_file()
    }


def h5_values(path):
    """{name: value} of every dataset in the h5 file."""
    values = {}

    def collect(name, obj):
        if isinstance(obj, h5py.Dataset):
            values[name] = obj[()]

    with h5py.File(path, "r") as f:
        f.visititems(collect)
    return values


def test_averages_what_there_is_into_a_loadable_output_dir(trained_run):
    """--n=5 with 3 checkpoints averages all 3 and says so; `<run>/averaged` holds the average
    named after the newest step and the run's config, the run's own files are unchanged, and the
    averaged dir is an output_dir a model restores from."""
    before = digests(trained_run)
    result = average(f"--output_dir={trained_run}", "--n=5")
    assert result.returncode == 0, result.stderr
    assert (f"Only 3 checkpoint(s) in {trained_run} (older ones were not written, or "
            f"--keep_checkpoint_max removed them), fewer than the 5 asked for; averaging "
            f"those.") in result.stdout
    assert "steps 2, 4, 6" in result.stdout

    avg_dir = trained_run / "averaged"
    assert sorted(os.listdir(avg_dir)) == ["averaged.json", "ckpt-6.weights.h5", "flags.txt",
                                           "hparams.json"]
    # The mark that makes the trainer refuse to train in this folder.
    assert json.loads((avg_dir / "averaged.json").read_text()) == {
        "averaged_from": str(trained_run), "steps": [2, 4, 6]}
    assert digests(trained_run) == before
    assert (avg_dir / "hparams.json").read_text() == (trained_run / "hparams.json").read_text()
    run_flags = (trained_run / "flags.txt").read_text().splitlines()
    expected_flags = [f"--output_dir={avg_dir}" if line.startswith("--output_dir=") else line
                      for line in run_flags]
    assert (avg_dir / "flags.txt").read_text().splitlines() == expected_flags

    averaged = h5_values(avg_dir / "ckpt-6.weights.h5")
    assert averaged.keys() == h5_values(trained_run / CHECKPOINT_NAMES[-1]).keys()
    assert averaged["optimizer/vars/0"] == 6  # Adam's step counter, the newest's

    model = model_restored_from(avg_dir)
    assert int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == 6
    restored = model.get_weights()
    per_checkpoint = []
    for name in CHECKPOINT_NAMES:
        model.load_weights(trained_run / name)
        per_checkpoint.append(model.get_weights())
    for got, *values in zip(restored, *per_checkpoint):
        np.testing.assert_allclose(got, np.mean(values, axis=0), rtol=1e-6, atol=1e-7)


def test_averages_only_the_last_n_into_avg_dir(trained_run, tmp_path):
    """--n=2 averages steps 4 and 6 only, into the --avg_dir given."""
    avg_dir = tmp_path / "big_avg"
    result = average(f"--output_dir={trained_run}", "--n=2", f"--avg_dir={avg_dir}")
    assert result.returncode == 0, result.stderr
    assert "steps 4, 6," in result.stdout and "Only" not in result.stdout
    last_two = [h5_values(trained_run / name) for name in CHECKPOINT_NAMES[1:]]
    averaged = h5_values(avg_dir / "ckpt-6.weights.h5")
    weight = "input_embedding/vars/0"
    np.testing.assert_allclose(averaged[weight], (last_two[0][weight] + last_two[1][weight]) / 2,
                               rtol=1e-6)


@pytest.mark.parametrize("make_dir, message", [(True, "No checkpoints"), (False, "does not exist")])
def test_no_checkpoints_is_an_error_naming_the_directory(tmp_path, make_dir, message):
    """An empty or missing --output_dir fails, naming it, and writes nothing."""
    output_dir = tmp_path / "empty_run"
    if make_dir:
        output_dir.mkdir()
    result = average(f"--output_dir={output_dir}")
    assert result.returncode != 0
    assert message in result.stderr and str(output_dir) in result.stderr
    assert not (output_dir / "averaged").exists()


def test_avg_dir_may_not_be_the_run_itself(trained_run):
    """The average would replace the newest checkpoint there; refused, nothing changes."""
    before = digests(trained_run)
    result = average(f"--output_dir={trained_run}", f"--avg_dir={trained_run}")
    assert result.returncode != 0 and "--avg_dir must differ" in result.stderr
    assert digests(trained_run) == before


@pytest.mark.parametrize("subdir", ["train", "eval", "export"])
def test_avg_dir_may_not_be_a_folder_the_runs_commands_write(trained_run, subdir):
    """TensorBoard's train/ and eval/ runs, an export's versions: an average among them would
    mix with what the trainer and exporter write there next. Refused; nothing is written."""
    before = sorted(os.listdir(trained_run))
    result = average(f"--output_dir={trained_run}", f"--avg_dir={trained_run / subdir}")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"error: --avg_dir={trained_run / subdir} is the run's {subdir}/ folder, which the "
        f"run's commands write; name a folder of the average's own (by default "
        f"{trained_run / 'averaged'}).")
    assert sorted(os.listdir(trained_run)) == before
    if subdir == "train":
        assert not any(name.endswith(".h5") for name in os.listdir(trained_run / subdir))


def test_avg_dir_may_not_hold_another_runs_files(trained_run, tmp_path):
    """Its hparams.json and flags.txt, or a checkpoint of the same step, would be replaced; an
    earlier average of this run is written over (the default folder's second average)."""
    other_run = tmp_path / "other_run"
    other_run.mkdir()
    for name in ("hparams.json", "flags.txt", "ckpt-6.weights.h5"):
        (other_run / name).write_text(f"the other run's {name}")
    bare = tmp_path / "bare_checkpoints"
    bare.mkdir()
    (bare / "ckpt-6.weights.h5").write_text("someone's checkpoint")
    for folder, held in ((other_run, "hparams.json, flags.txt, ckpt-6.weights.h5"),
                         (bare, "ckpt-6.weights.h5")):
        before = digests(folder)
        result = average(f"--output_dir={trained_run}", f"--avg_dir={folder}")
        assert result.returncode == 1
        assert result.stderr.strip() == (
            f"error: --avg_dir={folder} holds files of another run ({held}), which the average "
            f"would replace; name a new folder, or an earlier average of {trained_run}.")
        assert digests(folder) == before
    again = tmp_path / "again"
    for n in (3, 2):
        result = average(f"--output_dir={trained_run}", f"--avg_dir={again}", f"--n={n}")
        assert result.returncode == 0, result.stderr
    assert json.loads((again / "averaged.json").read_text())["steps"] == [4, 6]


def test_averages_the_n_checkpoints_ending_at_checkpoint_path_such_as_best(trained_run,
                                                                           tmp_path):
    """--checkpoint_path names the run's best/ folder, holding step 4's checkpoint: --n=2
    averages the run's step 2 with it, and step 6 (newer) is left out."""
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    (run / "best").mkdir()
    shutil.copy(run / "ckpt-4.weights.h5", run / "best")
    avg_dir = tmp_path / "avg"
    result = average(f"--output_dir={run}", f"--checkpoint_path={run / 'best'}", "--n=2",
                     f"--avg_dir={avg_dir}")
    assert result.returncode == 0, result.stderr
    assert "steps 2, 4," in result.stdout
    first_two = [h5_values(trained_run / name) for name in CHECKPOINT_NAMES[:2]]
    averaged = h5_values(avg_dir / "ckpt-4.weights.h5")
    weight = "input_embedding/vars/0"
    np.testing.assert_allclose(averaged[weight], (first_two[0][weight] + first_two[1][weight]) / 2,
                               rtol=1e-6)
    # More than there are up to step 4: the two, counted as such (step 6 is not among them).
    result = average(f"--output_dir={run}", f"--checkpoint_path={run / 'best'}", "--n=3",
                     f"--avg_dir={avg_dir}")
    assert result.returncode == 0, result.stderr
    assert (f"Only 2 checkpoint(s) up to step 4 in {run} (older ones were not written, or "
            f"--keep_checkpoint_max removed them), fewer than the 3 asked for; averaging "
            f"those.") in result.stdout
    assert "steps 2, 4," in result.stdout


def test_a_new_average_replaces_the_earlier_one_in_its_folder(trained_run, tmp_path):
    """The folder's one checkpoint is the average its averaged.json describes, which the
    decoder then reads: not an earlier average of a newer step."""
    avg_dir = tmp_path / "avg"
    for extra in ([], [f"--checkpoint_path={trained_run / 'ckpt-4.weights.h5'}"]):
        result = average(f"--output_dir={trained_run}", "--n=2", f"--avg_dir={avg_dir}", *extra)
        assert result.returncode == 0, result.stderr
    assert sorted(name for name in os.listdir(avg_dir) if name.endswith(".h5")) == [
        "ckpt-4.weights.h5"]
    assert json.loads((avg_dir / "averaged.json").read_text())["steps"] == [2, 4]


def test_a_damaged_averaged_json_is_one_line_naming_it_and_nothing_is_written(trained_run,
                                                                                tmp_path):
    """Written over by hand (decodes, say): the folder is still an average, which neither a new
    average nor the trainer may take for another folder."""
    avg_dir = tmp_path / "avg"
    assert average(f"--output_dir={trained_run}", "--n=2", f"--avg_dir={avg_dir}").returncode == 0
    (avg_dir / "averaged.json").write_text("Ein Mann fährt Rad.\n")
    kept = digests(avg_dir)
    damaged = [f"error: {avg_dir / 'averaged.json'} is not a readable averaged.json "
               f"(avg_checkpoints marks an averaged model's folder with it); average into a "
               f"new --avg_dir, or delete {avg_dir} and average again."]
    again = average(f"--output_dir={trained_run}", "--n=2", f"--avg_dir={avg_dir}")
    assert again.returncode == 1 and again.stderr.splitlines() == damaged, again.stderr
    trained = run_module("t2t_repro.trainer", *TINY_RUN, f"--output_dir={avg_dir}",
                         "--train_steps=8", "--schedule=train")
    assert trained.returncode == 1 and trained.stderr.splitlines() == damaged, trained.stderr
    assert digests(avg_dir) == kept


def test_a_checkpoint_path_of_another_run_is_refused_naming_both(trained_run, tmp_path):
    """Its weights would be averaged with this run's, under this run's name."""
    other = tmp_path / "other"
    shutil.copytree(trained_run, other)
    foreign = other / "ckpt-6.weights.h5"
    result = average(f"--output_dir={trained_run}", f"--checkpoint_path={foreign}", "--n=2",
                     f"--avg_dir={tmp_path / 'avg'}")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"error: --checkpoint_path names {foreign}, which is not a checkpoint of the run in "
        f"{trained_run} (nor of its best/), whose checkpoints it would be averaged with; name "
        f"one of that run's, or give --output_dir the run it belongs to."]
    assert not (tmp_path / "avg").exists()


@pytest.mark.parametrize("n", [0, -1, "2", 2.0, True])
def test_average_run_takes_a_whole_number_of_checkpoints_from_python(trained_run, tmp_path, n):
    """As --n's bound does on the command line (0 would average them all)."""
    from t2t_repro.errors import ConfigurationError
    from t2t_repro.training.averaging import average_run

    with pytest.raises(ConfigurationError, match=f"^n={re.escape(repr(n))}: average at least "
                                                 f"one checkpoint"):
        average_run(str(trained_run), str(tmp_path / "avg"), n)
    assert not (tmp_path / "avg").exists()


@pytest.mark.parametrize("name, text, error", [
    # The average's folder would hold a copy no command can read (the JSON error follows).
    ("hparams.json", '{"hidden_size": 32,', "{damaged} is not a readable hparams file ("),
    # A decode written over it: h5py's own error names no file.
    ("ckpt-4.weights.h5", "Ein Mann fährt Rad.\n",
     "{damaged} is not a readable checkpoint (not HDF5: cut short or written over); restore it "
     "from a copy, or move it out of its folder (a run then resumes from the checkpoint before "
     "it)."),
])
def test_a_damaged_record_or_checkpoint_is_named_before_anything_is_written(
        trained_run, tmp_path, name, text, error):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    damaged = run / name
    damaged.write_text(text)
    result = average(f"--output_dir={run}", "--n=2", f"--avg_dir={tmp_path / 'avg'}")
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    expected = "error: " + error.format(damaged=damaged)
    assert line == expected if expected.endswith(".") else line.startswith(expected)
    assert not (tmp_path / "avg").exists()


def test_a_checkpoint_path_alone_names_the_run_to_average(trained_run, tmp_path):
    """Without --output_dir the run is the one --checkpoint_path's checkpoint belongs to."""
    checkpoint = trained_run / "ckpt-4.weights.h5"
    result = average(f"--checkpoint_path={checkpoint}", "--n=2", f"--avg_dir={tmp_path}/avg")
    assert result.returncode == 0, result.stderr
    assert (f"Using --output_dir={trained_run}, the run --checkpoint_path={checkpoint} belongs "
            f"to." in result.stderr)
    assert f"checkpoint(s) of {trained_run}, steps 2, 4," in result.stdout
