"""Scoring and ensembles on small random Transformers, against NumPy: a target's score is the
sum of its pieces' teacher-forced log-probabilities; an ensemble's distribution is the log of
the mean of its models' probabilities, in scoring and in every greedy step; an ensemble of one
model, or of two copies of it, decodes as the model; models of different vocabularies are
refused."""

import keras
import numpy as np
import pytest

from t2t_repro.decoding.ensemble import Ensemble
from t2t_repro.decoding.scoring import Scorer
from t2t_repro.decoding.transformer_search import TransformerBeamSearch
from t2t_repro.errors import ConfigurationError
from t2t_repro.hparams import create_hparams
from t2t_repro.models.transformer import Transformer, shift_right
from t2t_repro.names import EOS_ID

VOCAB = 23


def random_model(seed, overrides="", vocab=VOCAB):
    keras.utils.set_random_seed(seed)
    hparams = create_hparams("transformer_tiny", f"layer_prepostprocess_dropout=0.0,{overrides}")
    return Transformer(hparams, vocab, vocab).build_weights()


@pytest.fixture(scope="module")
def models():
    """Two models of different weights and sizes (hidden 32 and 48), and a copy of the first."""
    first = random_model(1)
    copy = random_model(7)
    copy.set_weights(first.get_weights())
    second = random_model(2, "hidden_size=48,filter_size=96,num_heads=4")
    return first, copy, second


def random_pairs(seed, count=6):
    """Sources and targets of random lengths, each ending in EOS."""
    rng = np.random.default_rng(seed)
    return [(list(rng.integers(2, VOCAB, rng.integers(1, 9))) + [EOS_ID],
             list(rng.integers(2, VOCAB, rng.integers(1, 12))) + [EOS_ID])
            for _ in range(count)]


def padded(id_lists):
    batch = np.zeros((len(id_lists), max(map(len, id_lists))), np.int32)
    for row, ids in enumerate(id_lists):
        batch[row, : len(ids)] = ids
    return batch


def numpy_log_probs(model, sources, targets):
    """[batch, t, vocab]: the model's teacher-forced log-softmax in float64."""
    logits = keras.ops.convert_to_numpy(
        model({"inputs": sources, "targets": targets})).astype(np.float64)
    return logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)


def numpy_ensemble_log_probs(models, sources, targets):
    stacked = np.stack([numpy_log_probs(model, sources, targets) for model in models])
    return np.logaddexp.reduce(stacked, axis=0) - np.log(len(models))


def summed(log_probs, targets):
    picked = np.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
    return np.where(targets != 0, picked, 0.0).sum(axis=1)


@pytest.mark.parametrize("members", [[0], [0, 2]], ids=["one model", "two different models"])
def test_scores_are_summed_teacher_forced_log_probabilities(models, members):
    chosen = [models[index] for index in members]
    pairs = random_pairs(3)
    sources, targets = padded([s for s, _ in pairs]), padded([t for _, t in pairs])
    expected = summed(numpy_ensemble_log_probs(chosen, sources, targets), targets)
    model = chosen[0] if len(chosen) == 1 else Ensemble(chosen)
    scores, lengths = Scorer(model)([s for s, _ in pairs], [t for _, t in pairs])
    np.testing.assert_allclose(scores, expected, atol=1e-4)
    assert list(lengths) == [len(t) for _, t in pairs]


def test_the_ensemble_is_not_one_of_its_models(models):
    """The check above could not tell an ensemble from a model if they scored alike."""
    first, _, second = models
    pairs = random_pairs(4)
    args = ([s for s, _ in pairs], [t for _, t in pairs])
    ensemble, alone = Scorer(Ensemble([first, second]))(*args)[0], Scorer(first)(*args)[0]
    assert np.abs(ensemble - alone).min() > 1e-3


def test_every_greedy_step_takes_the_argmax_of_the_mean_probability(models):
    """Greedy decoding with two different models: each chosen token is the argmax of NumPy's
    log-mean-exp of the two models' probabilities given the prefix chosen so far, and the
    score is the sum of those log-probabilities, renormalised as the search does over every id
    but the padding id 0."""
    first, _, second = models
    sources = padded([s for s, _ in random_pairs(5)])
    output = TransformerBeamSearch(Ensemble([first, second]), beam_size=1, alpha=0.0,
                                   extra_length=6)(sources)
    decoded = output.best()
    reference = numpy_ensemble_log_probs([first, second], sources, decoded)
    reference[..., 0] = -np.inf
    reference -= np.logaddexp.reduce(reference, axis=-1, keepdims=True)
    for row, ids in enumerate(decoded):
        length = np.count_nonzero(ids)
        assert list(reference[row, :length].argmax(axis=-1)) == list(ids[:length])
    np.testing.assert_allclose(output.scores[:, 0], summed(reference, decoded), atol=1e-4)


@pytest.mark.parametrize("beam_size", [1, 3])
@pytest.mark.parametrize("members", [[0], [0, 1]], ids=["of one", "of two copies"])
def test_an_ensemble_of_one_model_or_its_copies_decodes_as_the_model(models, members,
                                                                     beam_size):
    sources = padded([s for s, _ in random_pairs(6)])
    alone = TransformerBeamSearch(models[0], beam_size=beam_size, alpha=0.6, extra_length=6)
    ensemble = TransformerBeamSearch(Ensemble([models[i] for i in members]),
                                     beam_size=beam_size, alpha=0.6, extra_length=6)
    expected, got = alone(sources), ensemble(sources)
    np.testing.assert_array_equal(got.ids, expected.ids)
    np.testing.assert_allclose(got.scores, expected.scores, atol=1e-5)


def test_teacher_forced_decode_of_an_ensemble_is_its_log_mean_probability(models):
    first, _, second = models
    pairs = random_pairs(8)
    sources, targets = padded([s for s, _ in pairs]), padded([t for _, t in pairs])
    ensemble = Ensemble([first, second])
    memory, mask = ensemble.encode(sources, training=False)
    got = keras.ops.convert_to_numpy(ensemble.decode(shift_right(targets), memory, mask))
    expected = numpy_ensemble_log_probs([first, second], sources, targets)
    np.testing.assert_allclose(got, expected, atol=1e-4)


def test_models_of_different_vocabularies_are_an_error_naming_them(models):
    other = random_model(4, vocab=VOCAB + 5)
    with pytest.raises(ConfigurationError, match=r"ende-b has input_vocab_size=28, ende-a has "
                                                 r"23"):
        Ensemble([models[0], other], names=["ende-a", "ende-b"])
