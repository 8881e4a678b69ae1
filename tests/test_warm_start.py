"""Fine-tuning with --warm_start_from: a new run starts from another run's weights with a
fresh optimizer at step 0; only training hparams may differ; a warm-started run that stops
resumes from its own checkpoints. (Vocabularies: tests/problems/test_text_files.py.)"""

import json
import shutil

import pytest

from conftest import one_line_error, read_scalars, run_module
from t2t_repro import registry
from t2t_repro.errors import ConfigurationError
from t2t_repro.hparams import create_hparams
from t2t_repro.training import checkpoints, warm_start
from t2t_repro.training.run_factory import create_training_run

PROBLEM = "algorithmic_copy"
HPARAMS = "batch_size=256,max_length=24,num_hidden_layers=1"  # mechanics: one layer
# Training-only hparams a fine-tuning run may change.
FINE_TUNING_HPARAMS = f"{HPARAMS},learning_rate_constant=0.5,layer_prepostprocess_dropout=0.2"
RUN = [f"--problem={PROBLEM}", "--hparams_set=transformer_tiny", "--eval_steps=2",
       "--eval_decode_examples=0", "--random_seed=1", "--log_every=2"]
SOURCE_STEPS = 6


def trainer(*args):
    return run_module("t2t_repro.trainer", *RUN, *args)


@pytest.fixture(scope="module")
def source_run(tmp_path_factory):
    """6 steps, evaluated (2 eval batches) at its last step."""
    output_dir = tmp_path_factory.mktemp("warm_start") / "source"
    result = trainer(f"--hparams={HPARAMS}", f"--output_dir={output_dir}",
                     f"--train_steps={SOURCE_STEPS}", f"--eval_every={SOURCE_STEPS}")
    assert result.returncode == 0, result.stderr
    return output_dir


def test_the_first_evaluation_equals_the_source_runs_of_the_same_checkpoint(source_run,
                                                                            tmp_path):
    """Before any update, the warm-started model evaluates on the same eval batches exactly
    as the source run evaluated its step-6 checkpoint, with its optimizer at step 0."""
    hparams = create_hparams("transformer_tiny", FINE_TUNING_HPARAMS)
    problem = registry.problems[PROBLEM]()
    checkpoint = warm_start.source_checkpoint(str(source_run))
    warm_start.check_source(checkpoint, problem, hparams)  # as the trainer checks it
    lines = []
    run = create_training_run(problem, hparams, str(tmp_path / "tuned"), eval_steps=2,
                              warm_start_from=checkpoint, print_fn=lines.append)
    assert run.restore() == 0
    assert any(line.startswith(f"Warm-started from {checkpoint}") for line in lines)
    assert int(run.model.optimizer.iterations.numpy()) == 0
    ours = run.evaluate()
    source = read_scalars(source_run / "eval")
    for name in ("loss", "accuracy"):
        assert ours[name] == pytest.approx(source[name][SOURCE_STEPS], rel=1e-5), name


def test_a_warm_started_run_counts_from_step_0_and_resumes_from_its_own_checkpoints(
        source_run, tmp_path):
    output_dir = tmp_path / "tuned"
    tuned = [f"--hparams={FINE_TUNING_HPARAMS}", f"--output_dir={output_dir}",
             f"--warm_start_from={source_run}", "--schedule=train"]
    first = trainer(*tuned, "--train_steps=4", "--save_checkpoints_steps=2")
    assert first.returncode == 0, first.stderr
    source_checkpoint = source_run / f"ckpt-{SOURCE_STEPS}.weights.h5"
    assert f"Warm-started from {source_checkpoint}" in first.stdout
    assert [step for step, _ in checkpoints.list_checkpoints(output_dir)] == [2, 4]
    assert f"--warm_start_from={source_run}" in (output_dir / "flags.txt").read_text()
    # Stopped at step 4 and run again (as after a kill): its own checkpoint, not the source,
    # with the flag left out as its refusal below advises, and its record of the start kept.
    resumed = trainer(*tuned[:2], "--schedule=train", "--train_steps=6")
    assert resumed.returncode == 0, resumed.stderr
    assert f"Resumed from {output_dir}/ckpt-4.weights.h5 at step 4." in resumed.stdout
    assert "Warm-started" not in resumed.stdout
    assert checkpoints.list_checkpoints(output_dir)[-1][0] == 6
    assert f"--warm_start_from={source_run}" in (output_dir / "flags.txt").read_text()
    again = trainer(*tuned, "--train_steps=6")  # the first command, once more
    assert again.returncode == 0, again.stderr
    assert "Already trained 6 of 6 steps; nothing to do." in again.stdout
    # Another source for a run with checkpoints of its own would be ignored: refused.
    flags_before = (output_dir / "flags.txt").read_text()
    elsewhere = trainer(*tuned[:2], f"--warm_start_from={source_checkpoint}", "--train_steps=8")
    assert one_line_error(elsewhere) == (
        f"error: --warm_start_from={source_checkpoint}: {output_dir} holds checkpoints of its "
        f"own (the newest at step 6), which started from {source_run}, and a run resumes from "
        f"its own; leave --warm_start_from out to resume it, or fine-tune into a new "
        f"--output_dir.")
    assert (output_dir / "flags.txt").read_text() == flags_before
    assert checkpoints.list_checkpoints(output_dir)[-1][0] == 6


def test_warm_start_from_given_to_a_run_trained_from_scratch_is_an_error(source_run):
    """Its checkpoints started from no other run; nothing is written."""
    flags_before = (source_run / "flags.txt").read_text()
    refused = trainer(f"--hparams={HPARAMS}", f"--output_dir={source_run}",
                      f"--warm_start_from={source_run}", f"--train_steps={SOURCE_STEPS + 2}")
    assert one_line_error(refused) == (
        f"error: --warm_start_from={source_run}: {source_run} holds checkpoints of its own (the "
        f"newest at step {SOURCE_STEPS}), which did not start from another run, and a run "
        f"resumes from its own; leave --warm_start_from out to resume it, or fine-tune into a "
        f"new --output_dir.")
    assert (source_run / "flags.txt").read_text() == flags_before
    assert checkpoints.list_checkpoints(source_run)[-1][0] == SOURCE_STEPS


def test_model_hparams_that_differ_are_an_error_naming_each_before_anything_is_written(
        source_run, tmp_path):
    output_dir = tmp_path / "tuned"
    result = trainer(f"--hparams={FINE_TUNING_HPARAMS},hidden_size=32,num_heads=2",
                     f"--output_dir={output_dir}", f"--warm_start_from={source_run}",
                     "--train_steps=2")
    line = one_line_error(result)
    assert "hidden_size=32 (source 64)" in line and "num_heads=2 (source 4)" in line
    assert "learning_rate_constant" not in line.split("hparams:")[1].split(";")[0]
    assert not output_dir.exists()


@pytest.mark.parametrize("source, why", [
    ("nowhere", "does not exist; name a trained run's folder or one of its checkpoints."),
    ("notes.txt", "is not a checkpoint (Keras weights in HDF5, named ckpt-<step>.weights.h5); "
                  "name a checkpoint file, or a directory holding one."),
    ("fake.weights.h5", "is not a checkpoint (Keras weights in HDF5, named "
                        "ckpt-<step>.weights.h5); name a checkpoint file, or a directory "
                        "holding one."),
    ("eval", "holds no checkpoint (ckpt-<step>.weights.h5); train first, or name a checkpoint "
             "file or a folder holding one."),
], ids=["missing", "a text file", "named as weights", "a folder without checkpoints"])
def test_a_source_that_is_no_checkpoint_is_a_one_line_error_naming_the_flag(
        tmp_path, source, why):
    (tmp_path / "notes.txt").write_text("not weights\n")
    (tmp_path / "fake.weights.h5").write_text("not weights\n")
    (tmp_path / "eval").mkdir()  # a run's folder of event files
    result = trainer(f"--hparams={HPARAMS}", f"--output_dir={tmp_path / 'tuned'}",
                     f"--warm_start_from={tmp_path / source}", "--train_steps=2")
    assert one_line_error(result) == f"error: --warm_start_from={tmp_path / source} {why}"
    assert not (tmp_path / "tuned").exists()


def copied_source(source_run, folder, flags_text=None):
    """A copy of the source run's hparams.json and step-6 checkpoint, and `flags_text` as its
    flags.txt (None: none)."""
    folder.mkdir()
    for name in ("hparams.json", f"ckpt-{SOURCE_STEPS}.weights.h5"):
        shutil.copy(source_run / name, folder / name)
    if flags_text is not None:
        (folder / "flags.txt").write_text(flags_text)
    return folder


@pytest.mark.parametrize("flags_text, named", [
    ("--problem=copy_elsewhere\n", "was trained on problem copy_elsewhere, which is not "
                                   "registered here; give the --t2t_usr_dir that registers it."),
    (None, "flags.txt names no problem, so the vocabulary"),
])
def test_a_source_whose_problem_is_unknown_is_a_one_line_error(source_run, tmp_path, flags_text,
                                                               named):
    """Its vocabulary cannot be compared with this run's."""
    source = copied_source(source_run, tmp_path / "source", flags_text)
    result = trainer(f"--hparams={HPARAMS}", f"--output_dir={tmp_path / 'tuned'}",
                     f"--warm_start_from={source}", "--train_steps=2")
    assert named in one_line_error(result)
    assert not (tmp_path / "tuned").exists()


def test_a_checkpoint_outside_a_run_is_checked_against_the_hparams_stored_in_it(source_run,
                                                                               tmp_path):
    """Without hparams.json beside it or above it, the hparams stored in the checkpoint say
    what it was trained with (algorithmic_copy has no vocabulary file to compare); a
    checkpoint without them (Keras's own, or an older one) is refused, as what it was trained
    with is unknown."""
    import h5py

    source = copied_source(source_run, tmp_path / "loose")
    checkpoint = source / f"ckpt-{SOURCE_STEPS}.weights.h5"
    (source / "hparams.json").unlink()
    tuned = trainer(f"--hparams={FINE_TUNING_HPARAMS}", f"--output_dir={tmp_path / 'tuned'}",
                    f"--warm_start_from={checkpoint}", "--train_steps=2")
    assert tuned.returncode == 0, tuned.stderr
    assert f"Warm-started from {checkpoint}" in tuned.stdout
    two_layers = HPARAMS.replace("num_hidden_layers=1", "num_hidden_layers=2")
    deeper = trainer(f"--hparams={two_layers}",
                     f"--output_dir={tmp_path / 'deeper'}", f"--warm_start_from={checkpoint}",
                     "--train_steps=2")
    assert one_line_error(deeper).startswith(
        f"error: --warm_start_from={checkpoint} was trained with other model hparams: "
        f"num_hidden_layers=2 (source 1);")
    with h5py.File(checkpoint, "r+") as weights:
        del weights.attrs["t2t_repro_hparams"]
    unknown = trainer(f"--hparams={HPARAMS}", f"--output_dir={tmp_path / 'unknown'}",
                      f"--warm_start_from={checkpoint}", "--train_steps=2")
    assert one_line_error(unknown) == (
        f"error: no hparams.json beside {checkpoint} or in the folder above it, and the "
        f"checkpoint holds no hparams (older checkpoints do not), so what it was trained with "
        f"is unknown; name a checkpoint of a run the trainer wrote.")
    assert not (tmp_path / "deeper").exists() and not (tmp_path / "unknown").exists()


def test_a_run_trained_from_python_is_recorded_for_fine_tuning_as_the_trainers(tmp_path):
    """`create_training_run` records hparams.json and the problem in flags.txt as the trainer
    does, so a fine-tuning run's checks read it; the same folder refuses other model
    hparams."""
    problem = registry.problems[PROBLEM]()
    hparams = create_hparams("transformer_tiny", HPARAMS)
    source = tmp_path / "from_python"
    run = create_training_run(problem, hparams, str(source), seed=1, eval_steps=2,
                              save_checkpoints_steps=2, print_fn=lambda line: None)
    run.train(2, evaluate_every_segment=False)
    assert json.loads((source / "hparams.json").read_text()) == hparams.values()
    assert (source / "flags.txt").read_text().splitlines() == [
        f"--problem={PROBLEM}", "--model=transformer", f"--output_dir={source}"]

    checkpoint = warm_start.source_checkpoint(str(source))
    assert checkpoint == str(source / "ckpt-2.weights.h5")
    assert warm_start.source_hparams(checkpoint) == hparams
    warm_start.check_source(checkpoint, problem, create_hparams("transformer_tiny",
                                                                FINE_TUNING_HPARAMS))

    recorded = (source / "hparams.json").read_text()
    with pytest.raises(ConfigurationError,
                       match=r"other hparams: hidden_size=32 \(the run's 64\)\. "):
        create_training_run(problem, create_hparams("transformer_tiny", f"{HPARAMS},"
                                                    "hidden_size=32"), str(source))
    with pytest.raises(ConfigurationError, match=f"^--problem=algorithmic_reverse disagrees "
                                                 f"with --problem={PROBLEM} that "):
        create_training_run(registry.problems["algorithmic_reverse"](), hparams, str(source))
    assert (source / "hparams.json").read_text() == recorded
    assert (source / "flags.txt").read_text().splitlines()[0] == f"--problem={PROBLEM}"
    for steps in ("5", 0, 4.0, True):
        with pytest.raises(ConfigurationError) as raised:
            run.train(steps)
        assert str(raised.value) == (f"train_steps={steps!r}: train to step 1 or later "
                                     f"(train_steps is a whole number of optimizer updates).")
    assert checkpoints.latest_checkpoint(str(source)) == checkpoint
    with pytest.raises(ConfigurationError, match=r"^problem='translate_ende' is not a Problem: "
                                                 r"pass one, such as registry\.problems\["):
        create_training_run("translate_ende", hparams, str(tmp_path / "other"))
    with pytest.raises(ConfigurationError, match=r"^hparams='transformer_tiny' is not HParams: "
                                                 r"pass them, such as hparams\.create_hparams"):
        create_training_run(problem, "transformer_tiny", str(tmp_path / "other"))
    assert not (tmp_path / "other").exists()

    # The trainer resumes it from its flags.txt, taking its hparams.json for the hparams set
    # and overrides that flags.txt cannot record.
    resumed = run_module("t2t_repro.trainer", f"--flagfile={source / 'flags.txt'}",
                         "--train_steps=4", "--schedule=train")
    assert resumed.returncode == 0, resumed.stderr
    assert f"Resumed from {checkpoint} at step 2." in resumed.stdout
    assert checkpoints.latest_checkpoint(str(source)) == str(source / "ckpt-4.weights.h5")
    assert (source / "hparams.json").read_text() == recorded
