"""The trainer's best checkpoint and early stopping (--eval_early_stopping_*), as a user runs
them: `<output_dir>/best/` against the eval scalars logged, resuming, and decoding from it."""

import json

import pytest

from conftest import read_scalars, run_module
from t2t_repro import hparams as hparams_lib
from t2t_repro.training.checkpoints import list_checkpoints, stored_hparams

TINY_RUN = [
    "--problem=algorithmic_copy",
    "--hparams_set=transformer_tiny",
    "--hparams=batch_size=256,max_length=24,num_hidden_layers=1",  # mechanics: one layer
    "--eval_steps=2",
    "--log_every=5",
    "--eval_every=5",
    "--random_seed=1",
]
# Token accuracy never gains 1, so the first evaluation (step 5) stays the best and the run
# stops at the first evaluation 10 steps after it: step 15, long before --train_steps.
NEVER_IMPROVES = [
    "--eval_decode_examples=0", "--train_steps=100", "--save_checkpoints_steps=5",
    "--keep_checkpoint_max=1", "--eval_early_stopping_metric=accuracy",
    "--eval_early_stopping_metric_delta=1", "--eval_early_stopping_steps=10",
]


def run_trainer(*args):
    return run_module("t2t_repro.trainer", *TINY_RUN, *args)


def best_record(output_dir):
    return json.loads((output_dir / "best" / "best.json").read_text())


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """A run that early stopping ended at step 15, its best checkpoint that of step 5."""
    output_dir = tmp_path_factory.mktemp("early_stopping") / "run"
    result = run_trainer(f"--output_dir={output_dir}", *NEVER_IMPROVES)
    assert result.returncode == 0, result.stderr
    return output_dir, result


def test_early_stopping_ends_the_run_naming_the_best_checkpoint_which_pruning_keeps(stopped_run):
    output_dir, result = stopped_run
    best = output_dir / "best" / "ckpt-5.weights.h5"
    assert ("Early stopping at step 15: accuracy has not improved by at least 1 in 10 steps"
            in result.stdout)
    assert f"the best checkpoint is {best} (step 5, accuracy" in result.stdout
    assert [step for step, _ in list_checkpoints(output_dir)] == [15]  # keep_checkpoint_max=1
    assert [step for step, _ in list_checkpoints(output_dir / "best")] == [5]
    for _, path in list_checkpoints(output_dir) + list_checkpoints(output_dir / "best"):
        assert stored_hparams(path) == hparams_lib.load(str(output_dir))
    logged = read_scalars(output_dir / "eval")["accuracy"]
    assert sorted(logged) == [5, 10, 15]
    record = best_record(output_dir)
    assert record == {"step": 5, "metric": "accuracy", "value": pytest.approx(logged[5]),
                      "minimize": False, "decodes": None}


def test_a_resumed_stopped_run_keeps_its_record_and_trains_no_further(stopped_run):
    output_dir, _ = stopped_run
    record = best_record(output_dir)
    flags_before = (output_dir / "flags.txt").read_text()
    resumed = run_trainer(f"--output_dir={output_dir}", *NEVER_IMPROVES, "--train_steps=200")
    assert resumed.returncode == 0, resumed.stderr
    assert "Early stopping at step 15" in resumed.stdout
    assert (output_dir / "flags.txt").read_text() == flags_before  # the record of what trained
    assert [step for step, _ in list_checkpoints(output_dir)] == [15]
    assert sorted(read_scalars(output_dir / "eval")["accuracy"]) == [5, 10, 15]
    assert best_record(output_dir) == record


def test_the_decoder_reads_the_best_checkpoint_from_checkpoint_path(stopped_run):
    output_dir, _ = stopped_run
    result = run_module("t2t_repro.decoder", f"--output_dir={output_dir}",
                        f"--checkpoint_path={output_dir / 'best'}",
                        "--decode_hparams=beam_size=1,alpha=0.0", input="1 2 3\n")
    assert result.returncode == 0, result.stderr
    assert f"Decoding with {output_dir / 'best' / 'ckpt-5.weights.h5'}" in (result.stdout
                                                                            + result.stderr)


def test_the_exporter_exports_the_best_checkpoint_as_its_step(stopped_run):
    output_dir, _ = stopped_run
    result = run_module("t2t_repro.exporter", f"--output_dir={output_dir}",
                        f"--checkpoint_path={output_dir / 'best'}",
                        "--decode_hparams=beam_size=1,alpha=0.0")
    assert result.returncode == 0, result.stderr
    assert f"Exported {output_dir / 'best' / 'ckpt-5.weights.h5'}" in result.stderr
    assert (output_dir / "export" / "5" / "saved_model.pb").is_file()


def test_by_default_the_best_is_the_main_decode_metric_with_its_decodes_file(tmp_path):
    """algorithmic_copy ranks by exact_match; the best is the earliest evaluation with the
    highest value logged, and best.json names the decodes it was scored on."""
    output_dir = tmp_path / "run"
    result = run_trainer(f"--output_dir={output_dir}", "--eval_decode_examples=2",
                         "--decode_hparams=beam_size=1,alpha=0.0", "--train_steps=10")
    assert result.returncode == 0, result.stderr
    logged = read_scalars(output_dir / "eval")["exact_match"]
    assert sorted(logged) == [5, 10]
    best_step = min(logged, key=lambda step: (-logged[step], step))
    record = best_record(output_dir)
    assert record == {"step": best_step, "metric": "exact_match",
                      "value": pytest.approx(logged[best_step]), "minimize": False,
                      "decodes": f"eval/decodes-{best_step}.txt"}
    assert (output_dir / record["decodes"]).is_file()
    assert f"Best checkpoint: {output_dir / 'best' / f'ckpt-{best_step}.weights.h5'}" in (
        result.stdout)


@pytest.mark.parametrize("flags, message", [
    (["--eval_decode_examples=0", "--eval_early_stopping_steps=10"],
     "ranking checkpoints by exact_match needs --eval_decode_examples > 0"),
    (["--schedule=train", "--eval_early_stopping_steps=10"],
     "--eval_early_stopping_steps needs evaluations during training"),
    # Refused before training, not at the first evaluation.
    (["--eval_early_stopping_metric=exact_matsh"],
     "the evaluation reports no exact_matsh to rank checkpoints by "
     "(--eval_early_stopping_metric); it reports accuracy, exact_match, loss, "
     "neg_log_perplexity."),
])
def test_early_stopping_without_what_it_needs_is_a_one_line_error(tmp_path, flags, message):
    result = run_trainer(f"--output_dir={tmp_path / 'run'}", "--train_steps=10", *flags)
    assert result.returncode == 1
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("error: ") and message in last_line
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()


def test_schedule_train_names_the_evaluation_flags_it_leaves_unused(tmp_path):
    """TINY_RUN sets --eval_every and --eval_steps away from their defaults; --schedule=train
    evaluates nothing, so they and the metric are named as unused, and no eval folder or best
    checkpoint is written."""
    output_dir = tmp_path / "run"
    result = run_trainer(f"--output_dir={output_dir}", "--schedule=train", "--train_steps=2",
                         "--eval_early_stopping_metric=loss")
    assert result.returncode == 0, result.stderr
    assert ("--schedule=train evaluates nothing: --eval_every=5, --eval_steps=2, "
            "--eval_early_stopping_metric=loss have no effect (--schedule=train_and_evaluate "
            "evaluates as it trains).") in result.stdout.splitlines()
    assert not (output_dir / "eval").exists() and not (output_dir / "best").exists()
    assert list_checkpoints(str(output_dir))[-1][0] == 2
