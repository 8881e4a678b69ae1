"""DecodeEvaluation, the trainer's per-eval decoding: which examples it reads and how it scores
them, with an oracle search standing in for the model so the expected scores are known."""

import numpy as np
import pytest

from t2t_repro import registry
from t2t_repro.data.problem import EVAL
from t2t_repro.decoding import text_decoding
from t2t_repro.decoding.beam_search import BeamSearchOutput
from t2t_repro.names import EOS_ID, PAD_ID


class _ReversingSearch:
    """"Decodes" each source into its symbols reversed, then EOS: right for algorithmic_reverse,
    except that sources longer than `longest_right` lose their last output symbol."""

    longest_right = None

    def __init__(self, model, decode_hparams):
        self.model = model

    def __call__(self, inputs):
        ids = np.full((len(inputs), 1, inputs.shape[1]), PAD_ID, np.int32)
        for row, source in enumerate(inputs):
            output = [token for token in source if token not in (PAD_ID, EOS_ID)][::-1]
            if self.longest_right is not None and len(output) > self.longest_right:
                output = output[:-1]
            ids[row, 0, : len(output) + 1] = output + [EOS_ID]
        return BeamSearchOutput(ids, np.zeros((len(inputs), 1), np.float32))


@pytest.fixture
def oracle(monkeypatch):
    monkeypatch.setattr(text_decoding, "create_search", _ReversingSearch)
    return _ReversingSearch


def _evaluation(problem_name, num_examples):
    problem = registry.problems[problem_name]()
    decode_hparams = text_decoding.create_decode_hparams(problem)
    return problem, text_decoding.DecodeEvaluation(problem, decode_hparams, num_examples)


def test_minus_one_reads_the_whole_eval_set_in_order():
    problem, evaluation = _evaluation("algorithmic_reverse", -1)
    sequences = problem.sequences(EVAL)
    assert len(evaluation.input_texts) == len(sequences) > 7
    assert evaluation.input_texts[:3] == [" ".join(map(str, s)) for s in sequences[:3]]
    assert evaluation.target_texts[0] == " ".join(map(str, sequences[0][::-1]))


def test_a_count_reads_the_first_examples():
    problem, evaluation = _evaluation("algorithmic_reverse", 7)
    assert len(evaluation.input_texts) == 7
    assert evaluation.input_texts == [" ".join(map(str, s)) for s in problem.sequences(EVAL)[:7]]


def test_scores_the_decodes_with_the_problems_metric(oracle):
    _, evaluation = _evaluation("algorithmic_reverse", 50)
    assert evaluation(model=object()) == {"exact_match": 1.0}


def test_a_wrong_decode_counts_against_exact_match(oracle, monkeypatch):
    monkeypatch.setattr(oracle, "longest_right", 12)
    problem, evaluation = _evaluation("algorithmic_reverse", -1)
    sequences = problem.sequences(EVAL)
    right = sum(len(s) <= 12 for s in sequences)
    assert 0 < right < len(sequences)
    assert evaluation(model=object()) == {"exact_match": pytest.approx(right / len(sequences))}
