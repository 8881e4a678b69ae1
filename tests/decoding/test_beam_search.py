"""Beam search (paper §6.1): the length penalty, search results worked out by hand on scripted
next-token distributions, and the Transformer searches checked against independent references.
"""

import math

import keras
import numpy as np
import pytest
from keras import ops

from t2t_repro.decoding.beam_search import NEG_INF, BeamSearch, BeamSearchOutput, length_penalty
from t2t_repro.decoding.text_decoding import decode_id_lists
from t2t_repro.decoding.transformer_search import TransformerBeamSearch
from t2t_repro.hparams import create_hparams
from t2t_repro.models.transformer import Transformer

# Attention over a single key (the first position) is legitimate here.
pytestmark = pytest.mark.filterwarnings("ignore:You are using a softmax over axis -1")

# The scripted vocabulary: PAD (never predicted), EOS and three words.
PAD, EOS, A, B, C = 0, 1, 2, 3, 4
VOCAB = 5
# The logit of a token of probability 0: the search's own "impossible", so that such a token
# never makes a hypothesis (one ending in EOS would be finished, and outrank any cut one).
IMPOSSIBLE = NEG_INF
log = math.log


def _lp(length, alpha):
    return ((5 + length) / 6) ** alpha


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0, 2.0])
@pytest.mark.parametrize("length", [1, 2, 7, 50])
def test_length_penalty_is_gnmt(length, alpha):
    assert float(ops.convert_to_numpy(length_penalty(length, alpha))) == pytest.approx(
        _lp(length, alpha), rel=1e-6
    )


# ---------------------------------------------------------------------------------------------
# Scripted searches. A script maps a prefix (tuple of output ids) to its next-token
# distribution {id: probability}; prefixes it does not list get `DEFAULT`. The step function
# walks a prefix tree: its state is each hypothesis's tree node, which the search reorders with
# the hypotheses, and the node's child along the token just chosen is the next node.

DEFAULT = {EOS: 0.9, A: 0.05, B: 0.03, C: 0.02}

# Worked by hand for beam 2, max length 10 (products are sequence probabilities):
# step 0:  EOS .08 | a .5 | b .42                      alive a, b;  finished [EOS] .08
# step 1:  a c .30 | b EOS .294 | a EOS .10 | a a .075  (the 4 = 2·beam best continuations)
#          alive a c, a a;  finished b EOS .294, a EOS .10 ([EOS] .08 drops out)
# step 2:  a c EOS .27 | a a EOS .0375 | a a a .0225 | a c a .018
#          alive a a a, a c a;  finished b EOS .294, a c EOS .27
# α = 0:   b EOS (log .294 = -1.224) beats a c EOS (log .27 = -1.309). The worst finished,
#          log .27, beats the best alive, log .0225: stop after 3 steps.
# α = 1:   lp(2) = 7/6, lp(3) = 8/6: a c EOS (-1.309 / 1.333 = -0.982) beats b EOS
#          (-1.224 / 1.167 = -1.049); the longer hypothesis wins. The best alive could still
#          reach log .0225 / lp(10) = -3.794 / 2.5 = -1.518 <= -1.049: stop after 3 steps.
LENGTH_PENALTY_SCRIPT = {
    (): {EOS: 0.08, A: 0.5, B: 0.42},
    (A,): {EOS: 0.2, A: 0.15, B: 0.05, C: 0.6},
    (B,): {EOS: 0.7, A: 0.1, B: 0.15, C: 0.05},
    (A, C): {EOS: 0.9, A: 0.06, B: 0.03, C: 0.01},
    (A, A): {EOS: 0.5, A: 0.3, B: 0.15, C: 0.05},
}

# Never EOS; worked by hand for beam 2:
# step 0:  a .6 | b .4
# step 1:  a a .42 | b a .36 | a b .18 | b b .04     alive a a, b a
# step 2:  a a a .336 | b a a .252 | b a b .108 | a a b .084
# Max length 3: the step-2 continuations all end, a a a (.336) and b a a (.252) are kept.
# Max length 2: the step-1 continuations all end, a a (.42) and b a (.36) are kept.
NO_EOS_SCRIPT = {
    (): {A: 0.6, B: 0.4},
    (A,): {A: 0.7, B: 0.3},
    (B,): {A: 0.9, B: 0.1},
    (A, A): {A: 0.8, B: 0.2},
    (B, A): {A: 0.7, B: 0.3},
}


def _tree_tables(scripts):
    """(log-prob table [nodes, VOCAB], child table [nodes, VOCAB], root node per script).

    Node 0 is the shared default node, its own child along every token."""
    nodes = {}
    for index, script in enumerate(scripts):
        for prefix in script:
            nodes[index, prefix] = len(nodes) + 1
    log_probs = np.full((len(nodes) + 1, VOCAB), IMPOSSIBLE, np.float32)
    children = np.zeros((len(nodes) + 1, VOCAB), np.int32)
    for token, probability in DEFAULT.items():
        log_probs[0, token] = log(probability)
    for (index, prefix), node in nodes.items():
        assert math.isclose(sum(scripts[index][prefix].values()), 1.0), prefix
        for token, probability in scripts[index][prefix].items():
            log_probs[node, token] = log(probability)
        for token in range(VOCAB):
            children[node, token] = nodes.get((index, prefix + (token,)), 0)
    roots = np.array([nodes[index, ()] for index in range(len(scripts))], np.int32)
    return log_probs, children, roots


def _tree_step(sequences, position, nodes, constants):
    """The scripts' step function: each hypothesis's next node along the token just chosen, and
    that node's next-token log-probabilities."""
    log_probs, children, row_roots = constants
    previous = sequences[:, position]
    followed = ops.take_along_axis(
        ops.take(children, nodes, axis=0), ops.expand_dims(previous, 1), axis=1
    )[:, 0]
    nodes = ops.where(position == 0, row_roots, followed)
    return ops.take(log_probs, nodes, axis=0), nodes


def _scripted_search(scripts, max_lengths, beam_size=2, alpha=0.0, force_max_length=False,
                     done_per_step=None):
    """Beam-searches one script per sentence; returns (BeamSearchOutput, steps run).
    `done_per_step`, a list, receives each step's per-sentence done flags."""
    log_probs, children, roots = _tree_tables(scripts)
    search = BeamSearch(_tree_step, beam_size, alpha, force_max_length=force_max_length)
    # Counts the compiled step's runs, one per decoded position.
    compiled_step, steps = search._step, []

    def counted_step(*args):
        steps.append(args[-1])
        search_state, state = compiled_step(*args)
        if done_per_step is not None:
            done_per_step.append(ops.convert_to_numpy(search_state["done"]).tolist())
        return search_state, state

    search._step = counted_step
    constants = tuple(
        ops.convert_to_tensor(table)
        for table in (log_probs, children, np.repeat(roots, beam_size))
    )
    state = ops.zeros((len(scripts) * beam_size,), "int32")
    return search(state, constants, max_lengths), len(steps)


@pytest.mark.parametrize(
    "alpha, expected_ids, expected_scores",
    [
        pytest.param(
            0.0, [[B, EOS, PAD], [A, C, EOS]], [log(0.294), log(0.27)],
            id="alpha_0_short_wins",
        ),
        pytest.param(
            1.0, [[A, C, EOS], [B, EOS, PAD]],
            [log(0.27) / _lp(3, 1.0), log(0.294) / _lp(2, 1.0)],
            id="alpha_1_long_wins",
        ),
    ],
)
def test_beam_2_returns_the_hand_computed_hypotheses(alpha, expected_ids, expected_scores):
    output, steps = _scripted_search([LENGTH_PENALTY_SCRIPT], [10], alpha=alpha)
    assert isinstance(output, BeamSearchOutput)
    # Every beam comes back, best first, each ending in EOS then padding.
    np.testing.assert_array_equal(output.ids, [expected_ids])
    np.testing.assert_allclose(output.scores, [expected_scores], rtol=1e-5)
    np.testing.assert_array_equal(output.best(), [expected_ids[0]])
    assert steps == 3


@pytest.mark.parametrize("max_length, expected_steps", [(16, 3), (17, 4)])
def test_early_stop_bounds_alive_hypotheses_by_lp_of_the_maximum_length(
    max_length, expected_steps
):
    """α = 1, finished after step 2: a c EOS -0.982 and b EOS -1.049; best alive log .0225.
    lp(16) = 3.5: -3.794 / 3.5 = -1.084 <= -1.049, stop after 3 steps. lp(17) = 3.667:
    -3.794 / 3.667 = -1.035 > -1.049, one more step: the alive a a a and a c a continue
    with DEFAULT, their best live continuation a a a a (.001125, -6.79 / 3.667 = -1.852)
    is hopeless, and a a a EOS (log .02025 / lp(4) = -2.600) does not enter the top 2."""
    output, steps = _scripted_search([LENGTH_PENALTY_SCRIPT], [max_length], alpha=1.0)
    assert steps == expected_steps
    np.testing.assert_array_equal(output.ids, [[[A, C, EOS], [B, EOS, PAD]]])


def test_without_eos_hypotheses_are_cut_at_the_maximum_length():
    output, steps = _scripted_search([NO_EOS_SCRIPT], [3])
    np.testing.assert_array_equal(output.ids, [[[A, A, A], [B, A, A]]])
    np.testing.assert_allclose(output.scores, [[log(0.336), log(0.252)]], rtol=1e-5)
    assert steps == 3


# tensor2tensor's fallback, on the case of issue 27: α = 0.6, a 20-token source and
# extra_length 50, so a maximum length of 70. Vocabulary: PAD, EOS, A, B and JUNK_TOKENS
# others. From the start, A .5 and B .4 (the rest spread over the others). After A: A again,
# forever, each with the probability that makes 70 of them (the first included) log P -12;
# EOS 1e-4. After B: B, and at position 19 EOS, each with the probability that makes the
# 20 tokens log P -8; EOS before position 19 1e-4. After any other token: uniform. Every
# token off the two paths costs about 6 nats, so no other hypothesis comes near them.
JUNK_TOKENS = 100
LOOP_LOG_PROB, LOOP_LENGTH = -12.0, 70
FINISHED_LOG_PROB, FINISHED_LENGTH = -8.0, 20


def _distribution(favourite, probability, eos=1e-4):
    """Log-probabilities over the vocabulary: `favourite` has `probability`, EOS `eos`, the
    junk tokens share the rest."""
    vocab = 4 + JUNK_TOKENS
    probabilities = np.full(vocab, (1.0 - probability - eos) / JUNK_TOKENS)
    probabilities[[PAD, EOS, A, B]] = 0.0
    probabilities[EOS] += eos
    probabilities[favourite] += probability
    with np.errstate(divide="ignore"):
        return np.maximum(np.log(probabilities), NEG_INF).astype(np.float32)


def _looping_or_finishing_step(sequences, position, state, constants):
    start, loop, finishing, finish, junk = constants
    first = sequences[:, 1]
    columns = ops.expand_dims(ops.arange(ops.shape(sequences)[1]), 0)
    in_output = (columns >= 1) & (columns <= position)
    on_path = ops.all(ops.where(in_output, sequences == ops.expand_dims(first, 1), True),
                      axis=1, keepdims=True)
    path_b = ops.where(position == FINISHED_LENGTH - 1, finish, finishing)
    row = ops.where(ops.expand_dims(first, 1) == A, loop, path_b)
    row = ops.where(on_path, row, junk)
    return ops.where(position == 0, ops.expand_dims(start, 0), row), state


@pytest.mark.parametrize("loop", ["host", "graph"])
def test_a_hypothesis_cut_at_the_maximum_length_never_outranks_a_finished_one(loop):
    """The looping A…A is cut at length 70 with log P -12: -12 / lp(70) = -2.64 would beat
    the finished B…B EOS, -8 / lp(20) = -3.40, were it ranked with the finished ones. A
    sentence that finished none returns its cut hypotheses (the tests above without EOS)."""
    alpha = 0.6
    loop_score = LOOP_LOG_PROB / _lp(LOOP_LENGTH, alpha)
    finished_score = FINISHED_LOG_PROB / _lp(FINISHED_LENGTH, alpha)
    assert round(loop_score, 2) == -2.64 and round(finished_score, 2) == -3.40
    start_a, start_b = 0.5, 0.4
    loop_token = math.exp((LOOP_LOG_PROB - log(start_a)) / (LOOP_LENGTH - 1))
    path_token = math.exp((FINISHED_LOG_PROB - log(start_b)) / (FINISHED_LENGTH - 1))
    start = _distribution(A, start_a, eos=0.0)
    start[B] = log(start_b)
    start[4:] = log((1 - start_a - start_b) / JUNK_TOKENS)
    junk = np.full(4 + JUNK_TOKENS, -log(3 + JUNK_TOKENS), np.float32)
    junk[PAD] = NEG_INF
    tables = (start, _distribution(A, loop_token), _distribution(B, path_token),
              _distribution(EOS, path_token, eos=0.0), junk)
    search = BeamSearch(_looping_or_finishing_step, 2, alpha, loop=loop)
    output = search(ops.zeros((2,), "int32"), tuple(map(ops.convert_to_tensor, tables)),
                    [LOOP_LENGTH])
    assert output.steps == LOOP_LENGTH  # the loop stayed alive to the end
    assert output.best()[0].tolist()[:FINISHED_LENGTH + 1] == [B] * 19 + [EOS, PAD]
    assert output.scores[0, 0] == pytest.approx(finished_score, abs=1e-4)
    # Only B…B EOS finished (the off-path tokens never stayed in the beam long enough to end):
    # the slot left empty holds the cut A…A, after it despite its better score.
    np.testing.assert_array_equal(output.ids[0, 1], [A] * LOOP_LENGTH)
    assert output.scores[0, 1] == pytest.approx(loop_score, abs=1e-4)


def test_each_sentence_stops_at_its_own_maximum_length():
    output, steps = _scripted_search([NO_EOS_SCRIPT, NO_EOS_SCRIPT], [3, 2])
    np.testing.assert_array_equal(
        output.ids, [[[A, A, A], [B, A, A]], [[A, A, PAD], [B, A, PAD]]]
    )
    np.testing.assert_allclose(
        output.scores, [[log(0.336), log(0.252)], [log(0.42), log(0.36)]], rtol=1e-5
    )
    assert steps == 3


def test_sentences_in_a_batch_are_searched_independently():
    together, _ = _scripted_search([LENGTH_PENALTY_SCRIPT, NO_EOS_SCRIPT], [10, 3], alpha=1.0)
    for row, (script, max_length) in enumerate([(LENGTH_PENALTY_SCRIPT, 10), (NO_EOS_SCRIPT, 3)]):
        alone, _ = _scripted_search([script], [max_length], alpha=1.0)
        width = alone.ids.shape[2]
        np.testing.assert_array_equal(together.ids[row, :, :width], alone.ids[0])
        assert not together.ids[row, :, width:].any()
        np.testing.assert_allclose(together.scores[row], alone.scores[0], rtol=1e-6)


def test_force_max_length_never_ends_with_eos():
    """EOS excluded from LENGTH_PENALTY_SCRIPT, the other probabilities renormalised:
    step 0: a .5/.92 = .543 | b .42/.92 = .457;
    step 1: (a) a .1875 b .0625 c .75, (b) a 1/3 b .5 c 1/6:
            a c .408 | b b .228 | b a .152 | a a .102     alive a c, b b;
    step 2: (a c) a .6 b .3 c .1, (b b: DEFAULT) a .5 b .3 c .2:
            a c a .245 | a c b .122 | b b a .114 | b b b .068, all cut at length 3."""
    output, steps = _scripted_search([LENGTH_PENALTY_SCRIPT], [3], force_max_length=True)
    np.testing.assert_array_equal(output.ids, [[[A, C, A], [A, C, B]]])
    a_c = (0.5 / 0.92) * (0.6 / 0.8)
    np.testing.assert_allclose(
        output.scores, [[log(a_c * 0.06 / 0.1), log(a_c * 0.03 / 0.1)]], rtol=1e-5
    )
    assert steps == 3


# Padding (id 0) gets real probability mass; the search must renormalise over the other ids:
# ()   pad .2 | a .4 | b .3 | EOS .1   ->  a .5 | b .375 | EOS .125
# (a)  pad .5 | EOS .3 | a .2          ->  EOS .6 | a .4
# (b)  pad .25 | EOS .5 | c .25        ->  EOS 2/3 | c 1/3
# Beam 2, α = 0.6: step 0 keeps a, b alive and finishes [EOS] (.125); step 1: a EOS .3 |
# b EOS .25 | a a .2 | b c .125, so a EOS and b EOS finish (both beat [EOS]: log .125 / lp(1)
# = -2.079 < log .25 / lp(2) = -1.264). Step 2 (DEFAULT): a a EOS .18 scores
# log .18 / lp(3) = -1.443, too low; the best alive, a a a .01, could reach at most
# log .01 / lp(10) = -2.657 <= -1.264: stop after 3 steps. (Without renormalising, b EOS
# .3 · .5 = .15 would beat a EOS .4 · .3 = .12.)
PADDING_MASS_SCRIPT = {
    (): {PAD: 0.2, A: 0.4, B: 0.3, EOS: 0.1},
    (A,): {PAD: 0.5, EOS: 0.3, A: 0.2},
    (B,): {PAD: 0.25, EOS: 0.5, C: 0.25},
}


def test_scores_are_log_probabilities_renormalised_without_padding():
    output, steps = _scripted_search([PADDING_MASS_SCRIPT], [10], alpha=0.6)
    np.testing.assert_array_equal(output.ids, [[[A, EOS], [B, EOS]]])
    np.testing.assert_allclose(
        output.scores,
        [[log(0.5 * 0.6) / _lp(2, 0.6), log(0.375 * 2 / 3) / _lp(2, 0.6)]],
        rtol=1e-5,
    )
    assert steps == 3


def test_one_sentence_stops_early_while_another_decodes_on():
    """α = 1. Sentence 0 (LENGTH_PENALTY_SCRIPT, max length 16) stops by the early-stop rule
    after 3 steps: its worst finished, b EOS, scores log .294 / lp(2) = -1.049, at least the
    -1.084 the best alive (a a a, log .0225) could reach at lp(16) = 3.5. Sentence 1
    (NO_EOS_SCRIPT, max length 5) goes on: after step 2 alive a a a .336, b a a .252;
    step 3 (DEFAULT): a a a EOS .3024 | b a a EOS .2268 | a a a a .0168 | b a a a .0126;
    finished a a a EOS (log .3024 / lp(4) = -0.797) and b a a EOS (-0.989), and the best
    alive reaches at most log .0168 / lp(5) = -2.452: stops after 4 steps. Sentence 0 keeps
    what it had finished when it stopped."""
    done = []
    output, steps = _scripted_search(
        [LENGTH_PENALTY_SCRIPT, NO_EOS_SCRIPT], [16, 5], alpha=1.0, done_per_step=done
    )
    assert steps == 4
    assert done == [[False, False], [False, False], [True, False], [True, True]]
    # The rule, by hand, for sentence 0 after step 2 (its third step).
    assert log(0.294) / _lp(2, 1.0) >= log(0.0225) / _lp(16, 1.0)
    np.testing.assert_array_equal(
        output.ids,
        [[[A, C, EOS, PAD], [B, EOS, PAD, PAD]], [[A, A, A, EOS], [B, A, A, EOS]]],
    )
    np.testing.assert_allclose(
        output.scores,
        [[log(0.27) / _lp(3, 1.0), log(0.294) / _lp(2, 1.0)],
         [log(0.3024) / _lp(4, 1.0), log(0.2268) / _lp(4, 1.0)]],
        rtol=1e-5,
    )


@pytest.mark.parametrize("beam_size, alpha", [(0, 0.6), (2, -0.1)])
def test_rejects_invalid_settings(beam_size, alpha):
    with pytest.raises(ValueError):
        BeamSearch(lambda *args: args, beam_size, alpha)


# ---------------------------------------------------------------------------------------------
# Transformer searches on tiny random models.

MODEL_VOCAB = 29
SOURCES = np.array([[5, 7, 9, 3, 1, 0], [4, 2, 8, 11, 12, 1], [6, 1, 0, 0, 0, 0]], np.int32)


def _model(seed=0, **overrides):
    overrides = {"layer_prepostprocess_dropout": 0.0, **overrides}
    hparams = create_hparams(
        "transformer_tiny", ",".join(f"{key}={value}" for key, value in overrides.items())
    )
    keras.utils.set_random_seed(seed)
    return Transformer(hparams, MODEL_VOCAB, MODEL_VOCAB).build_weights()


def _greedy_reference(model, sources, max_lengths):
    """Argmax of a full forward pass over the prefix at every step, up to EOS or the limit;
    id 0 (padding) is never an output."""
    memory, memory_mask = model.encode(sources, training=False)
    decoder_inputs = np.zeros((len(sources), 1), np.int32)
    finished = [None] * len(sources)
    for length in range(1, max(max_lengths) + 1):
        logits = ops.convert_to_numpy(
            model.decode(decoder_inputs, memory, memory_mask, training=False)
        )[:, -1]
        logits[:, 0] = -np.inf
        tokens = logits.argmax(axis=-1).astype(np.int32)
        decoder_inputs = np.concatenate([decoder_inputs, tokens[:, None]], axis=1)
        for row, token in enumerate(tokens):
            if finished[row] is None and (token == EOS or length == max_lengths[row]):
                finished[row] = decoder_inputs[row, 1:].copy()
    return finished


def _pad_to(ids, width):
    return np.pad(ids, (0, width - len(ids)))


def _strip(ids):
    return np.trim_zeros(np.asarray(ids), "b")


# Greedy: a (.5), then a (.4) over b (.35) and EOS (.25), then DEFAULT's EOS (.9): a a EOS.
# The 2 candidates of step 0 include EOS (.3) as well, which a beam of 1 must not keep.
EOS_SECOND_SCRIPT = {
    (): {A: 0.5, EOS: 0.3, B: 0.2},
    (A,): {A: 0.4, B: 0.35, EOS: 0.25},
}


def test_beam_1_follows_the_argmax_on_a_script():
    output, _ = _scripted_search([EOS_SECOND_SCRIPT], [10], beam_size=1)
    np.testing.assert_array_equal(output.best(), [[A, A, EOS]])
    np.testing.assert_allclose(output.scores, [[log(0.5 * 0.4 * 0.9)]], rtol=1e-5)


def _eos_leaning_model(seed):
    """An untrained model whose argmax varies along the output and sometimes is EOS: separate
    softmax weights with EOS's column scaled up (tied ones tend to repeat one token)."""
    model = _model(seed, normalize_first=True, shared_embedding_and_softmax_weights=False)
    kernel = ops.convert_to_numpy(model.softmax_projection.kernel).copy()
    kernel[:, EOS] *= 2.0
    model.softmax_projection.kernel.assign(kernel)
    return model


# Seed 5 ends rows 0 and 2 on EOS, seed 3 ends none; seed 2 ranks EOS second in row 2 (a
# beam search keeping 2 candidates at beam 1 would end that row early).
@pytest.mark.parametrize("seed", [2, 3, 5])
def test_beam_1_is_greedy_search(seed):
    model = _eos_leaning_model(seed)
    search = TransformerBeamSearch(model, beam_size=1, alpha=0.0, extra_length=4)
    max_lengths = search.max_lengths(SOURCES)
    expected = _greedy_reference(model, SOURCES, max_lengths)
    best = search(SOURCES).best()
    width = max(best.shape[1], max(len(ids) for ids in expected))
    for row in range(len(SOURCES)):
        np.testing.assert_array_equal(
            _pad_to(best[row], width), _pad_to(expected[row], width), err_msg=f"row {row}"
        )


@pytest.mark.parametrize("seed", [0, 3])
def test_cached_and_uncached_searches_agree(seed):
    model = _model(seed, num_encoder_layers=1, num_decoder_layers=2)
    outputs = [
        TransformerBeamSearch(model, beam_size=4, alpha=0.6, extra_length=4, use_cache=use_cache)(
            SOURCES
        )
        for use_cache in (True, False)
    ]
    np.testing.assert_array_equal(outputs[0].ids, outputs[1].ids)
    np.testing.assert_allclose(outputs[0].scores, outputs[1].scores, atol=1e-4)
    assert outputs[0].ids.shape[:2] == (3, 4)
    assert np.all(np.diff(outputs[0].scores, axis=1) <= 0)


def test_cached_search_encodes_projects_the_memory_and_lays_out_the_output_once(monkeypatch):
    """Counts Python-level calls over two batches of one shape: the compiled step traces the
    decoder once, so a projection inside it would be counted once more, and one laid out
    only there would be counted once in all."""
    model = _model(num_decoder_layers=2)
    counts = {"encode": 0, "cross_key": 0, "output_projection": 0}
    encode = model.encode
    output_projection = model.target_embedding.output_projection

    def counting_encode(*args, **kwargs):
        counts["encode"] += 1
        return encode(*args, **kwargs)

    def counting_output_projection(*args, **kwargs):
        counts["output_projection"] += 1
        return output_projection(*args, **kwargs)

    monkeypatch.setattr(model, "encode", counting_encode)
    monkeypatch.setattr(model.target_embedding, "output_projection", counting_output_projection)
    for layer in model.decoder_layers:
        key_call = layer.cross_attention.key_dense.call

        def counting_key_call(*args, key_call=key_call, **kwargs):
            counts["cross_key"] += 1
            return key_call(*args, **kwargs)

        monkeypatch.setattr(layer.cross_attention.key_dense, "call", counting_key_call)
    search = TransformerBeamSearch(model, beam_size=2, alpha=0.6, extra_length=4)
    search(SOURCES)
    search(SOURCES[::-1])
    # Laid out once per batch where that pays (TensorFlow's float32 matmul); under JAX the step
    # multiplies by the embedding as stored, which its one trace counts once.
    laid_out = 2 if keras.backend.backend() == "tensorflow" else 1
    assert counts == {"encode": 2, "cross_key": 4, "output_projection": laid_out}


class _RecordingSearch:
    """Stands in for a TransformerBeamSearch: "decodes" a source into its reverse, and records
    the batches it is given."""

    def __init__(self):
        self.batches = []

    def __call__(self, inputs):
        self.batches.append(inputs.copy())
        ids = np.zeros((len(inputs), 1, inputs.shape[1]), np.int32)
        for row, source in enumerate(inputs):
            reversed_source = _strip(source)[::-1]
            ids[row, 0, : len(reversed_source)] = reversed_source
        return BeamSearchOutput(ids, np.zeros((len(inputs), 1), np.float32))


def test_decode_id_lists_batches_by_length_and_restores_the_order():
    id_lists = [[5, 6, 7, 1], [8, 1], [9, 10, 11, 12, 13, 1], [14, 15, 1], [16, 1]]
    search, progress = _RecordingSearch(), []
    outputs = decode_id_lists(search, id_lists, batch_size=2,
                              progress=lambda done, total: progress.append((done, total)))
    for ids, (beams, scores) in zip(id_lists, outputs):
        np.testing.assert_array_equal(_strip(beams[0]), ids[::-1])
        assert scores.shape == (1,)
    batch_lengths = [sorted(np.count_nonzero(batch, axis=1)) for batch in search.batches]
    assert batch_lengths == [[2, 2], [3, 4], [6]]
    assert [batch.shape[1] for batch in search.batches] == [2, 4, 6]  # little padding
    assert progress == [(2, 5), (4, 5), (5, 5)]


def test_decode_id_lists_equals_decoding_each_sentence_alone():
    model = _model(seed=1)
    search = TransformerBeamSearch(model, beam_size=1, alpha=0.0, extra_length=3)
    id_lists = [[5, 7, 9, 3, 1], [6, 1], [4, 2, 8, 11, 12, 1], [13, 14, 1]]
    outputs = decode_id_lists(search, id_lists, batch_size=3)
    for ids, (beams, _) in zip(id_lists, outputs):
        alone = search(np.array([ids], np.int32)).best()[0]
        np.testing.assert_array_equal(_strip(beams[0]), _strip(alone))
