"""Sampling (decode hparams sampling_method=random, sampling_temp, sampling_keep_top_k,
sampling_keep_top_p) on a tiny random Transformer: top-k 1 is greedy search; the first token's
frequencies over many draws match the softmax at the temperature (a chi-square test at level
0.001, expected probabilities computed with NumPy from the model's own logits); top-k and
top-p never emit a token they exclude; a seed fixes the samples, on either loop."""

import keras
import numpy as np
import pytest
from scipy import stats

from t2t_repro.decoding.sampling import Sampler, create_sampler
from t2t_repro.decoding.text_decoding import create_decode_hparams
from t2t_repro.decoding.transformer_search import TransformerBeamSearch
from t2t_repro.hparams import HParamsError, create_hparams
from t2t_repro.models.transformer import Transformer
from t2t_repro.names import PAD_ID

pytestmark = pytest.mark.filterwarnings("ignore:You are using a softmax over axis -1")

VOCAB = 29
SOURCE = [5, 7, 9, 3, 1]
SOURCES = np.array([[5, 7, 9, 3, 1, 0], [4, 2, 8, 11, 12, 1], [6, 1, 0, 0, 0, 0]], np.int32)
DRAWS = 4000
# The chi-square test's level: a sampler drawing from the right distribution fails it with
# probability 0.001 for a given seed (the seeds here are fixed, so the outcome is too).
LEVEL = 1e-3


@pytest.fixture(scope="module")
def model():
    """transformer_tiny with random weights; its first-token distribution has probable,
    middling and improbable tokens (0.37, 0.12, ... at temperature 1)."""
    keras.utils.set_random_seed(0)
    hparams = create_hparams("transformer_tiny", "layer_prepostprocess_dropout=0.0,"
                             "shared_embedding_and_softmax_weights=false")
    return Transformer(hparams, VOCAB, VOCAB).build_weights()


def first_token_logits(model):
    """The model's logits for the first output token of SOURCE, computed by a plain forward
    pass (no search), as NumPy."""
    memory, memory_mask = model.encode(np.array([SOURCE], np.int32), training=False)
    logits = model.decode(np.zeros((1, 1), np.int32), memory, memory_mask, training=False)
    return keras.ops.convert_to_numpy(logits)[0, -1].astype(np.float64)


def softmax(logits):
    exp = np.exp(logits - logits.max())
    return exp / exp.sum()


def first_tokens(model, sampler, seed=7):
    """DRAWS first tokens sampled for SOURCE: one search over a batch of DRAWS copies, each
    decoding one token."""
    search = TransformerBeamSearch(model, beam_size=1, alpha=0.0, sampler=sampler, seed=seed)
    sources = np.tile(np.array([SOURCE], np.int32), (DRAWS, 1))
    return search(sources, max_lengths=np.ones(DRAWS, np.int32)).ids[:, 0, 0]


def chi_square_p_value(tokens, probabilities):
    """The p-value of the observed token counts under `probabilities` (over the vocabulary),
    tokens of expected count below 5 pooled into one category."""
    observed = np.bincount(tokens, minlength=VOCAB).astype(np.float64)
    expected = probabilities * len(tokens)
    small = expected < 5
    observed = np.append(observed[~small], observed[small].sum())
    expected = np.append(expected[~small], expected[small].sum())
    if expected[-1] == 0:
        assert observed[-1] == 0
        observed, expected = observed[:-1], expected[:-1]
    return stats.chisquare(observed, expected).pvalue


def model_probabilities(model, temperature):
    logits = first_token_logits(model)
    logits[PAD_ID] = -np.inf  # never an output
    return softmax(logits / temperature)


@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.5])
def test_first_token_frequencies_match_the_softmax_at_the_temperature(model, temperature):
    probabilities = model_probabilities(model, temperature)
    assert probabilities.max() < 0.9 and (probabilities > 0.02).sum() >= 3  # not degenerate
    tokens = first_tokens(model, Sampler(temperature))
    assert chi_square_p_value(tokens, probabilities) > LEVEL
    # The test has power: the same draws reject the distribution at another temperature.
    other = model_probabilities(model, temperature * 2)
    assert chi_square_p_value(tokens, other) < 1e-6


def test_top_k_samples_only_the_k_most_probable_in_their_proportions(model):
    probabilities = model_probabilities(model, 1.0)
    top = np.argsort(-probabilities)[:3]
    tokens = first_tokens(model, Sampler(keep_top_k=3))
    assert set(tokens.tolist()) == set(top.tolist())
    kept = np.zeros(VOCAB)
    kept[top] = probabilities[top] / probabilities[top].sum()
    assert chi_square_p_value(tokens, kept) > LEVEL


def test_top_p_samples_only_the_nucleus_in_its_proportions(model):
    """The nucleus: the most probable tokens, in order, until their mass reaches p."""
    temperature, p = 1.5, 0.6
    probabilities = model_probabilities(model, temperature)
    order = np.argsort(-probabilities)
    size = int(np.searchsorted(np.cumsum(probabilities[order]), p) + 1)
    nucleus = order[:size]
    assert 2 <= size < (probabilities > 1e-3).sum()  # it excludes tokens that would occur
    tokens = first_tokens(model, Sampler(temperature, keep_top_p=p))
    assert set(tokens.tolist()) == set(nucleus.tolist())
    kept = np.zeros(VOCAB)
    kept[nucleus] = probabilities[nucleus] / probabilities[nucleus].sum()
    assert chi_square_p_value(tokens, kept) > LEVEL


@pytest.mark.parametrize("loop", ["graph", "host"])
def test_top_k_1_is_greedy_search(model, loop):
    greedy = TransformerBeamSearch(model, beam_size=1, alpha=0.0, extra_length=8)(SOURCES)
    sampled = TransformerBeamSearch(model, beam_size=1, alpha=0.0, extra_length=8, loop=loop,
                                    sampler=Sampler(temperature=2.0, keep_top_k=1), seed=5)(SOURCES)
    np.testing.assert_array_equal(sampled.ids, greedy.ids)
    np.testing.assert_allclose(sampled.scores, greedy.scores, atol=1e-5)


@pytest.mark.parametrize("temperature", [1e-38, 1e-45, 5e-324])
def test_a_temperature_near_zero_samples_as_greedy_search(model, temperature):
    """However small the temperature (below float32's range too), the tempered logits stay
    usable: every draw is the most probable token, as greedy search's."""
    greedy = TransformerBeamSearch(model, beam_size=1, alpha=0.0, extra_length=8)(SOURCES)
    sampled = TransformerBeamSearch(model, beam_size=1, alpha=0.0, extra_length=8,
                                    sampler=Sampler(temperature), seed=5)(SOURCES)
    np.testing.assert_array_equal(sampled.ids, greedy.ids)


@pytest.mark.parametrize("temperature", [1e9, 1e30])
def test_a_token_the_search_rules_out_stays_out_at_any_temperature(model, temperature):
    """A temperature so high that every token is about as likely as any other still draws
    neither padding nor, where a target prefix forces a token, any other."""
    copies = 64
    prefixes = np.tile(np.array([[4, 6], [9, 0], [0, 0]], np.int32), (copies, 1))
    ids = TransformerBeamSearch(model, beam_size=1, alpha=0.0, extra_length=8,
                                sampler=Sampler(temperature), seed=5)(
        np.tile(SOURCES, (copies, 1)), target_prefix=prefixes).ids[:, 0]
    assert (ids[0::3, :2] == [4, 6]).all() and (ids[1::3, 0] == 9).all()
    # Padding only after the end: never a token after a 0.
    assert not ((ids[:, :-1] == PAD_ID) & (ids[:, 1:] != PAD_ID)).any()
    assert len(np.unique(ids[2::3, 0])) > VOCAB // 2  # the odds are flat indeed


def test_the_same_seed_samples_the_same_on_either_loop_and_another_seed_differs(model):
    sources = np.tile(SOURCES, (4, 1))

    def sample(seed, loop="graph"):
        return TransformerBeamSearch(model, beam_size=1, alpha=0.0, extra_length=8, loop=loop,
                                     sampler=Sampler(), seed=seed)(sources).ids

    first = sample(1)
    np.testing.assert_array_equal(sample(1), first)
    np.testing.assert_array_equal(sample(1, loop="host"), first)
    assert not np.array_equal(sample(2), first)
    # Copies of a sentence in one batch draw independently.
    assert len({tuple(row) for row in first[::3, 0]}) > 1


def test_decode_hparams_make_the_sampler():
    problem = _ProblemWithDefaults()
    hparams = create_decode_hparams(problem, "beam_size=1,sampling_method=random,"
                                    "sampling_temp=0.7,sampling_keep_top_k=5,"
                                    "sampling_keep_top_p=0.9")
    assert create_sampler(hparams) == Sampler(0.7, 5, 0.9)
    assert create_sampler(create_decode_hparams(problem, "beam_size=1")) is None


@pytest.mark.parametrize("overrides, message", [
    ("sampling_method=random", "needs beam_size=1, got beam_size=4; add beam_size=1"),
    ("beam_size=1,sampling_method=nucleus", "sampling_method must be one of"),
    ("beam_size=1,sampling_method=random,sampling_temp=0.0", "sampling_temp must be > 0"),
    ("beam_size=1,sampling_method=random,sampling_keep_top_k=-1", "sampling_keep_top_k must be"),
    ("beam_size=1,sampling_method=random,sampling_keep_top_p=0.0", "sampling_keep_top_p must be"),
])
def test_settings_it_cannot_run_are_errors_naming_them(overrides, message):
    with pytest.raises(HParamsError, match=message):
        create_sampler(create_decode_hparams(_ProblemWithDefaults(), overrides))


@pytest.mark.parametrize("overrides, named", [
    ("sampling_temp=0.5", "sampling_temp=0.5"),
    ("beam_size=1,sampling_keep_top_k=5,sampling_keep_top_p=0.9",
     "sampling_keep_top_k=5, sampling_keep_top_p=0.9"),
])
def test_a_sampling_setting_while_sampling_is_off_is_an_error(overrides, named):
    """Not ignored: greedy or beam search would run as if it were not there."""
    switch = "sampling_method=random"
    with pytest.raises(HParamsError, match=f"^decode hparam {named} applies only with {switch}; "
                                           f"add {switch} to --decode_hparams, or leave it out.$"):
        create_decode_hparams(_ProblemWithDefaults(), overrides)
    switched_on = create_decode_hparams(_ProblemWithDefaults(), f"{overrides},{switch}")
    for setting in named.split(", "):  # each kept as given
        name, value = setting.split("=")
        assert str(getattr(switched_on, name)) == value


class _ProblemWithDefaults:
    def default_decode_hparams(self):
        from t2t_repro.data.problem import Problem

        return Problem.default_decode_hparams(self)
