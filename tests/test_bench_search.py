"""`bench search`'s objective and search-error count, on the issue's hand-worked case: with
α = 0.6 a looping 70-piece hypothesis (log P −12) scores −12 / (75/6)^0.6 ≈ −2.64 and a
finished 20-piece one (log P −8) −8 / (25/6)^0.6 ≈ −3.40. Bad input is one line, before the run
is loaded."""

import numpy as np
import pytest

from t2t_repro.bench.search import objectives, search_error_count, teacher_forced


class _FixedScorer:
    """Stands in for `Scorer`: each target's (log P, pieces) looked up by its first id."""

    def __init__(self, scores):
        self.scores = scores

    def __call__(self, source_lists, target_lists):
        pairs = [self.scores[target[0]] for target in target_lists]
        return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])


def test_objective_is_log_probability_over_gnmt_length_penalty():
    scorer = _FixedScorer({7: (-12.0, 70), 9: (-8.0, 20)})
    scored = teacher_forced(scorer, [[1], [1]], [[7], [9]], batch_size=2)
    values = objectives(scored, alpha=0.6)
    np.testing.assert_allclose(values, [-12 / 12.5 ** 0.6, -8 / (25 / 6) ** 0.6], rtol=1e-6)
    np.testing.assert_allclose(values, [-2.64, -3.40], atol=5e-3)
    plain = objectives(scored, alpha=0.0)
    np.testing.assert_allclose(plain, [-12.0, -8.0])


def test_a_beam_best_below_the_greedy_hypothesis_is_a_search_error_and_ties_are_not():
    greedy = np.array([-3.0, -2.0, -5.0, -1.0])
    beam = np.array([-3.5, -2.0, -4.0, -1.0 - 5e-5])  # worse, equal, better, a float tie
    assert search_error_count(beam, greedy) == 1


@pytest.mark.parametrize("case, message", [
    ("no_run", "error: --output_dir={tmp}/none does not exist; name a trained run."),
    ("no_source", "error: cannot read --source_file={tmp}/none: No such file or directory."),
    ("line_counts", "error: --source_file={tmp}/two has 2 lines but --reference_file={tmp}/one "
                    "has 1; they must be aligned line by line."),
])
def test_bad_input_is_one_line_before_the_run_is_loaded(tmp_path, case, message):
    from t2t_repro.bench.__main__ import main

    (tmp_path / "one").write_text("a\n")
    (tmp_path / "two").write_text("a\nb\n")
    output_dir, source = {"no_run": ("none", "two"), "no_source": ("", "none"),
                          "line_counts": ("", "two")}[case]
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "search", f"--output_dir={tmp_path / output_dir}",
              f"--source_file={tmp_path / source}", f"--reference_file={tmp_path / 'one'}"])
    assert exit_.value.code == message.format(tmp=tmp_path)
