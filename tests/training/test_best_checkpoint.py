"""The best checkpoint and early stopping (`training.best_checkpoint`) on scripted metric values,
without a model: what is an improvement, when training stops, what `<output_dir>/best/` keeps."""

import json

import pytest

from t2t_repro import registry
from t2t_repro.errors import ConfigurationError
from t2t_repro.training.best_checkpoint import (BestCheckpoint, Criterion, choose_criterion,
                                                declared_decode_metrics, is_improvement)
from t2t_repro.training.checkpoints import list_checkpoints

# Evaluated every 10 steps; values are exact binary fractions, so that gains compare exactly.
#
# exact_match, maximised, delta 0, patience 30:
#   10: 0.25 first value, best 10 | 20: 0.5 better, best 20 | 30: 0.5 a tie, not better (10 since)
#   40: 0.75 better, best 40 | 50: 0.75 tie (10) | 60: 0.5 worse (20) | 70: 0.75 tie (30 >= 30)
#   -> stops at 70 with the best at 40; step 80 is never evaluated.
MAXIMISED = (Criterion("exact_match", minimize=False, delta=0.0, patience=30),
             [0.25, 0.5, 0.5, 0.75, 0.75, 0.5, 0.75, 1.0], 40, 70)
# loss, minimised, delta 0.5, patience 20:
#   10: 4.0 first, best 10 | 20: 3.75 gains 0.25 < 0.5 (10 since) | 30: 3.5 gains 0.5, best 30
#   40: 3.0 gains 0.5, best 40 | 50: 2.75 gains 0.25 (10) | 60: 2.75 gains 0.25 (20 >= 20)
#   -> stops at 60 with the best at 40, although 2.75 is lower than the best's 3.0.
MINIMISED = (Criterion("loss", minimize=True, delta=0.5, patience=20),
             [4.0, 3.75, 3.5, 3.0, 2.75, 2.75, 1.0], 40, 60)


def run_script(directory, criterion, values, print_fn=print):
    """Feeds `values` (at steps 10, 20, ...) to a BestCheckpoint, as a training run does;
    returns it and the step it stopped at (None: never)."""
    best = BestCheckpoint(str(directory), criterion, print_fn=print_fn)
    for step, value in zip(range(10, 10 * len(values) + 1, 10), values):
        best.add(step, {criterion.metric: value, "accuracy": 0.5}, write_step(step),
                 decodes=f"eval/decodes-{step}.txt")
        if best.should_stop(step):
            return best, step
    return best, None


def write_step(step):
    """A stand-in for `model.save_weights` that writes the step into the file."""
    def save_weights(path):
        with open(path, "w") as f:
            f.write(str(step))
    return save_weights


@pytest.mark.parametrize("script", [MAXIMISED, MINIMISED], ids=["maximised", "minimised_delta"])
def test_scripted_values_give_the_best_and_stopping_steps_worked_out_by_hand(tmp_path, script):
    criterion, values, best_step, stop_step = script
    best, stopped = run_script(tmp_path, criterion, values)
    assert stopped == stop_step
    assert [step for step, _ in list_checkpoints(tmp_path / "best")] == [best_step]
    assert (tmp_path / "best" / f"ckpt-{best_step}.weights.h5").read_text() == str(best_step)
    record = json.loads((tmp_path / "best" / "best.json").read_text())
    assert record == {"step": best_step, "metric": criterion.metric,
                      "value": values[best_step // 10 - 1], "minimize": criterion.minimize,
                      "decodes": f"eval/decodes-{best_step}.txt"}
    assert f"best checkpoint is {best.path()} (step {best_step}" in best.stopping_line(stopped)


def test_ties_and_gains_below_delta_are_no_improvement():
    assert is_improvement(0.5, None)
    assert not is_improvement(0.5, 0.5)
    assert not is_improvement(0.5, 0.5, minimize=True)
    assert is_improvement(0.75, 0.5, delta=0.25) and not is_improvement(0.625, 0.5, delta=0.25)
    assert is_improvement(1.0, 2.0, minimize=True) and not is_improvement(2.5, 2.0, minimize=True)


def test_a_resumed_record_continues_and_another_metric_starts_afresh(tmp_path):
    """The record of steps 10-40 carries over: a resumed run stops at 70 as one run would,
    and keeps step 40's checkpoint; ranking by another metric starts again, saying so."""
    criterion, values, _, _ = MAXIMISED
    run_script(tmp_path, criterion, values[:4])
    resumed = BestCheckpoint(str(tmp_path), criterion)
    assert resumed.record["step"] == 40 and not resumed.should_stop(60)
    assert resumed.should_stop(70)
    lines = []
    other = BestCheckpoint(str(tmp_path), Criterion("loss", minimize=True), print_fn=lines.append)
    assert other.record is None
    assert lines == [
        f"{tmp_path}/best/best.json ranks by exact_match (minimize=False), this run by loss "
        f"(minimize=True): the best checkpoint is chosen afresh from the next evaluation, whose "
        f"checkpoint replaces step 40's in {tmp_path}/best."]


def test_a_stray_checkpoint_left_by_a_kill_is_removed_on_resuming(tmp_path):
    criterion, values, _, _ = MAXIMISED
    run_script(tmp_path, criterion, values[:2])
    write_step(30)(str(tmp_path / "best" / "ckpt-30.weights.h5"))  # best.json not yet updated
    BestCheckpoint(str(tmp_path), criterion)
    assert [step for step, _ in list_checkpoints(tmp_path / "best")] == [20]


@pytest.mark.parametrize("problem, metric", [
    ("algorithmic_copy", "exact_match"), ("translate_ende", "bleu"),
    ("parsing_wsj", "bracket_f1")])
def test_the_default_metric_is_the_problems_main_decode_metric_maximised(problem, metric):
    criterion, note = choose_criterion(registry.problems[problem](), decoding=True)
    assert criterion == Criterion(metric, minimize=False) and note is None


def test_without_decoding_the_default_falls_back_to_loss_unless_early_stopping_is_asked():
    problem = registry.problems["translate_ende"]()
    criterion, note = choose_criterion(problem, decoding=False)
    assert criterion == Criterion("loss", minimize=True)
    assert "ranked by eval loss" in note and "bleu" in note
    for asked in ({"patience": 100}, {"metric": "bleu"}):
        with pytest.raises(ConfigurationError, match="bleu needs --eval_decode_examples > 0"):
            choose_criterion(problem, decoding=False, **asked)
    criterion, _ = choose_criterion(problem, decoding=False, metric="accuracy", patience=100)
    assert criterion == Criterion("accuracy", minimize=False, patience=100)


@pytest.mark.parametrize("problem, inputs, outputs", [
    ("algorithmic_copy", ["1 2"], ["1 2"]),
    ("translate_ende", None, ["Ein Hund ."]),
    ("translate_ende_rev", None, ["A dog ."]),
    ("translate_enfr", None, ["Un chien ."]),
    ("parsing_wsj", ["dogs bark"], ["(S (NP NNS )NP (VP VBP )VP )S"]),
])
def test_each_problem_declares_the_decode_metrics_it_reports(problem, inputs, outputs):
    problem = registry.problems[problem]()
    reported = problem.decode_metrics(inputs, outputs, outputs)
    assert tuple(reported) == declared_decode_metrics(problem)
    assert problem.main_decode_metric in reported


def test_a_metric_no_evaluation_reports_is_refused_before_training():
    for name, misspelt in (("algorithmic_copy", "exact_matsh"), ("translate_ende", "blue")):
        with pytest.raises(ConfigurationError) as error:
            choose_criterion(registry.problems[name](), decoding=True, metric=misspelt)
        assert f"reports no {misspelt} to rank checkpoints by" in str(error.value)
        assert "loss, neg_log_perplexity" in str(error.value)


def test_a_problem_that_overrides_decode_metrics_alone_is_checked_at_its_evaluation():
    """A user's problem whose own metric names the base class cannot know."""
    class Graded(registry.problems["algorithmic_copy"]):
        def decode_metrics(self, inputs, outputs, targets):
            return {"graded": 1.0}

    assert declared_decode_metrics(Graded()) is None
    criterion, _ = choose_criterion(Graded(), decoding=True, metric="graded")
    assert criterion == Criterion("graded", minimize=False)


def test_a_metric_the_evaluation_does_not_report_is_an_error_naming_those_it_does(tmp_path):
    best = BestCheckpoint(str(tmp_path), Criterion("blue", minimize=False))
    with pytest.raises(ConfigurationError, match="no blue .* it reports accuracy, loss"):
        best.add(10, {"loss": 1.0, "accuracy": 0.5}, write_step(10))
