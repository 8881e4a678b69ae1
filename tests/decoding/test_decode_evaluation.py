"""DecodeEvaluation, the trainer's per-eval decoding: which examples it reads and how it scores
them, with an oracle search standing in for the model so the expected scores are known; and
that a model training in mixed precision decodes in float32, as the decoder does."""

import importlib.util

import keras
import numpy as np
import pytest

from t2t_repro import registry
from t2t_repro.data.problem import EVAL
from t2t_repro.decoding import file_decoding, text_decoding
from t2t_repro.decoding.beam_search import BeamSearchOutput
from t2t_repro.errors import ConfigurationError
from t2t_repro.hparams import HParamsError
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


class _Float32Model:
    """Stands in for the trained model the oracle search ignores."""

    dtype_policy = keras.dtype_policies.DTypePolicy("float32")


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


@pytest.mark.parametrize("overrides, named", [
    ("return_beams=true", "return_beams=true"),
    ("return_alignments=true", "return_alignments=true"),
    ("return_beams=true,alignment_layer=0", "return_beams=true, alignment_layer=0"),
])
def test_output_line_settings_are_an_error_rather_than_ignored(overrides, named):
    """The trainer's --decode_hparams reach here: an evaluation writes no beams or alignments."""
    problem = registry.problems["algorithmic_reverse"]()
    decode_hparams = text_decoding.create_decode_hparams(problem, overrides)
    with pytest.raises(HParamsError, match=f"^decode hparam {named} shapes the decoder's output "
                                           f"lines; an evaluation scores each example's best "
                                           f"decode: leave it out of the trainer's "):
        text_decoding.DecodeEvaluation(problem, decode_hparams, 3)


@pytest.mark.skipif(importlib.util.find_spec("MeCab") is not None,
                    reason="sacreBLEU's Japanese tokenizer is installed here")
def test_a_bleu_that_cannot_be_computed_here_is_an_error_before_any_decoding(tmp_path):
    """A Japanese target's sacreBLEU needs sacreBLEU's ja extra: said when the evaluation (or
    the decoder's --decode_reference) is set up, not after the decoding (the folder holds no
    data and the files do not exist: neither is read)."""
    problem = registry.problems["translate_ende"](data_dir=str(tmp_path))
    problem.target_language = "ja"
    message = r"pip install 'sacrebleu\[ja\]'"
    with pytest.raises(ConfigurationError, match=message):
        text_decoding.DecodeEvaluation(problem, text_decoding.create_decode_hparams(problem), 3)
    with pytest.raises(ConfigurationError, match=message):
        file_decoding.read_sources(problem, str(tmp_path / "in.en"), str(tmp_path / "ref.ja"))


def test_a_count_reads_the_first_examples():
    problem, evaluation = _evaluation("algorithmic_reverse", 7)
    assert len(evaluation.input_texts) == 7
    assert evaluation.input_texts == [" ".join(map(str, s)) for s in problem.sequences(EVAL)[:7]]


def test_scores_the_decodes_with_the_problems_metric(oracle):
    _, evaluation = _evaluation("algorithmic_reverse", 50)
    assert evaluation(model=_Float32Model()) == {"exact_match": 1.0}


def test_a_wrong_decode_counts_against_exact_match(oracle, monkeypatch):
    monkeypatch.setattr(oracle, "longest_right", 12)
    problem, evaluation = _evaluation("algorithmic_reverse", -1)
    sequences = problem.sequences(EVAL)
    right = sum(len(s) <= 12 for s in sequences)
    assert 0 < right < len(sequences)
    assert evaluation(model=_Float32Model()) == {
        "exact_match": pytest.approx(right / len(sequences))}


def test_the_exact_match_report_marks_the_shown_decodes_and_counts_all(oracle, monkeypatch):
    """What the trainer's --decode_examples prints: 3 of 40 examples shown, each marked, and
    the count of all 40 that came out right."""
    monkeypatch.setattr(oracle, "longest_right", 12)
    problem, evaluation = _evaluation("algorithmic_reverse", 40)
    sequences = problem.sequences(EVAL)[:40]
    right = [len(s) <= 12 for s in sequences]
    assert 0 < sum(right) < 40 and not all(right[:3]) and any(right[:3])
    report = evaluation.exact_match_report(evaluation.decode(_Float32Model()), "Greedy", shown=3)
    lines = report.splitlines()
    assert len(lines) == 3 * 3 + 1
    for example, (sequence, is_right) in enumerate(zip(sequences[:3], right[:3])):
        reversed_text = " ".join(map(str, sequence[::-1]))
        output = reversed_text if is_right else " ".join(map(str, sequence[::-1][:-1]))
        assert lines[3 * example:3 * example + 3] == [
            f"  input:  {' '.join(map(str, sequence))}", f"  target: {reversed_text}",
            f"  output: {output}  [{'ok' if is_right else 'WRONG'}]"]
    assert lines[-1] == (f"Greedy: {sum(right)}/40 held-out sequences exactly right "
                         f"({sum(right) / 40:.1%}).")


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_a_mixed_precision_model_decodes_in_float32_as_the_decoder(policy):
    """The evaluation's decodes equal those of a float32 model given the same weights (the
    decoder's), and it decodes with a float32 model: the training model's policy untouched,
    its latest weights used at every call."""
    from t2t_repro.hparams import create_hparams
    from t2t_repro.models.transformer import Transformer

    problem = registry.problems["algorithmic_reverse"]()
    greedy = text_decoding.create_decode_hparams(problem, "beam_size=1")
    evaluation = text_decoding.DecodeEvaluation(problem, greedy, 12)
    hparams = create_hparams("transformer_tiny", "layer_prepostprocess_dropout=0.0,"
                             "shared_embedding_and_softmax_weights=false")
    sizes = (problem.input_vocab_size, problem.target_vocab_size)
    keras.utils.set_random_seed(4)
    training = Transformer(hparams, *sizes, dtype=policy).build_weights()
    # Untrained, EOS would end every decode at once: its logit is held at 0 instead.
    kernel = keras.ops.convert_to_numpy(training.softmax_projection.kernel).copy()
    kernel[:, EOS_ID] = 0.0
    training.softmax_projection.kernel.assign(kernel)
    decoder = Transformer(hparams, *sizes, dtype="float32").build_weights()
    decoder.set_weights(training.get_weights())
    expected = [problem.decode(beams[0]) for beams, _ in text_decoding.decode_id_lists(
        text_decoding.create_search(decoder, evaluation.decode_hparams), evaluation.input_ids,
        evaluation.decode_hparams.batch_size)]
    assert evaluation.decode(training) == expected
    assert len(set(expected)) > 3
    assert evaluation._search.model.compute_dtype == "float32"
    assert training.dtype_policy.name == policy
    # New weights (a later evaluation) are decoded with, not the first ones.
    training.set_weights([weight * 1.5 for weight in training.get_weights()])
    decoder.set_weights(training.get_weights())
    later = [problem.decode(beams[0]) for beams, _ in text_decoding.decode_id_lists(
        text_decoding.create_search(decoder, evaluation.decode_hparams), evaluation.input_ids,
        evaluation.decode_hparams.batch_size)]
    assert later != expected
    assert evaluation.decode(training) == later
