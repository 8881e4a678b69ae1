"""Label-smoothed cross-entropy and the token metrics against hand computations (paper §5.4)."""

import math

import keras
import numpy as np
import pytest

from t2t_repro.training.losses import (
    LabelSmoothedCrossEntropy,
    NegLogPerplexity,
    TargetTokens,
    TokenAccuracy,
)

PAD = 0
VOCAB = 4

# Two sequences of three target tokens over a vocabulary of 4; id 0 is padding.
LABELS = [[2, 3, PAD], [1, 2, 3]]
LOGITS = [
    [[0.5, -1.0, 2.0, 0.1], [1.5, 0.2, -0.3, 0.7], [3.0, -2.0, 0.0, 1.0]],
    [[-0.4, 0.9, 0.3, -1.2], [0.0, 0.0, 0.0, 0.0], [2.2, 1.1, -0.7, 0.4]],
]


def log_softmax_by_hand(row):
    log_total = math.log(sum(math.exp(x) for x in row))
    return [x - log_total for x in row]


def smoothed_loss_by_hand(labels, logits, epsilon, vocab=VOCAB):
    """Mean over non-padding tokens of -Σ_v q_v log p_v with q = 1-ε on the true token and
    ε/(V-1) on each other token, written out token by token."""
    total, count = 0.0, 0
    for label_row, logit_row in zip(labels, logits):
        for label, logits_at in zip(label_row, logit_row):
            if label == PAD:
                continue
            log_p = log_softmax_by_hand(logits_at)
            q = [1 - epsilon if v == label else epsilon / (vocab - 1) for v in range(vocab)]
            total += -sum(q_v * lp for q_v, lp in zip(q, log_p))
            count += 1
    return total / count


def loss_value(epsilon, labels, logits):
    loss = LabelSmoothedCrossEntropy(epsilon)(
        np.array(labels, "int32"), np.array(logits, "float32")
    )
    return float(keras.ops.convert_to_numpy(loss))


def metric_value(metric, batches):
    for labels, logits in batches:
        metric.update_state(np.array(labels, "int32"), np.array(logits, "float32"))
    return float(keras.ops.convert_to_numpy(metric.result()))


def test_smoothed_target_sums_to_one():
    """Sanity of the hand-side target: 1-ε + (V-1)·ε/(V-1) = 1."""
    epsilon = 0.1
    assert (1 - epsilon) + (VOCAB - 1) * epsilon / (VOCAB - 1) == pytest.approx(1.0)


def test_label_smoothed_loss_matches_hand_computation():
    """ε = 0.1 on a 2×3 batch with one padding position: the mean over the 5 real tokens of
    -Σ q log softmax(logits)."""
    expected = smoothed_loss_by_hand(LABELS, LOGITS, 0.1)
    assert loss_value(0.1, LABELS, LOGITS) == pytest.approx(expected, rel=1e-5)


def test_label_smoothed_loss_single_token_literal():
    """One token, label 1, logits [0, ln 2, 0, 0]: p = (1/5, 2/5, 1/5, 1/5), so
    loss = -(0.9 ln 0.4 + 3 · (0.1/3) · ln 0.2) = 0.985605..."""
    logits = [[[0.0, math.log(2.0), 0.0, 0.0]]]
    expected = -(0.9 * math.log(0.4) + 0.1 * math.log(0.2))
    assert expected == pytest.approx(0.985605, rel=1e-6)
    assert loss_value(0.1, [[1]], logits) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.2])
def test_uniform_logits_give_log_vocab(epsilon):
    """With equal logits every log p is -ln V, and q sums to 1, so the loss is ln V for any ε."""
    logits = np.zeros((2, 3, VOCAB), "float32")
    assert loss_value(epsilon, LABELS, logits) == pytest.approx(math.log(VOCAB), rel=1e-6)


def test_no_smoothing_is_negative_log_likelihood():
    """ε = 0 is the plain mean NLL of the true tokens over non-padding positions."""
    nlls = []
    for label_row, logit_row in zip(LABELS, LOGITS):
        for label, logits_at in zip(label_row, logit_row):
            if label != PAD:
                nlls.append(-log_softmax_by_hand(logits_at)[label])
    assert len(nlls) == 5
    assert loss_value(0.0, LABELS, LOGITS) == pytest.approx(sum(nlls) / 5, rel=1e-5)


def test_padding_does_not_affect_loss():
    """Logits at padding positions are ignored, and the mean is over real tokens only: a
    batch with extra padded positions has the loss of the same tokens without them."""
    reference = loss_value(0.1, LABELS, LOGITS)
    changed = np.array(LOGITS, "float32")
    changed[0, 2] = [-50.0, 40.0, 7.0, 13.0]  # the padding position
    assert loss_value(0.1, LABELS, changed) == pytest.approx(reference, rel=1e-6)

    # Pad both rows by two more positions with arbitrary logits.
    padded_labels = [row + [PAD, PAD] for row in LABELS]
    rng = np.random.default_rng(0)
    padded_logits = np.concatenate(
        [np.array(LOGITS, "float32"), rng.normal(size=(2, 2, VOCAB)).astype("float32") * 10],
        axis=1,
    )
    assert loss_value(0.1, padded_labels, padded_logits) == pytest.approx(reference, rel=1e-6)

    # The mean divides by 5 real tokens, not by 6 positions.
    assert reference == pytest.approx(smoothed_loss_by_hand(LABELS, LOGITS, 0.1), rel=1e-5)


def test_all_padding_gives_zero_not_nan():
    """A batch of padding only (possible at a shard's tail) contributes 0, not NaN."""
    value = loss_value(0.1, [[PAD, PAD]], np.zeros((1, 2, VOCAB), "float32"))
    assert value == 0.0


def test_token_accuracy_ignores_padding():
    """Accuracy counts real tokens across batches. Padding positions predict id 0 (which would
    count as correct if padding were scored).

    Batch 1: argmaxes (2, 0, 0) vs labels (2, 3, pad) -> 1 of 2 right.
    Batch 2: argmaxes (1, 2, 0) vs labels (1, 2, 3) -> 2 of 3 right.
    Total 3 of 5 = 0.6 (a mean of batch means would give 0.583).
    """
    batch1_logits = [[[0.0, 0.0, 5.0, 0.0], [5.0, 0.0, 0.0, 1.0], [5.0, 0.0, 0.0, 0.0]]]
    batch2_logits = [[[0.0, 5.0, 0.0, 0.0], [0.0, 0.0, 5.0, 0.0], [5.0, 0.0, 0.0, 1.0]]]
    accuracy = metric_value(
        TokenAccuracy(), [([[2, 3, PAD]], batch1_logits), ([[1, 2, 3]], batch2_logits)]
    )
    assert accuracy == pytest.approx(0.6)


def test_neg_log_perplexity_ignores_padding():
    """neg_log_perplexity is the mean over real tokens of log p(true token), unsmoothed,
    accumulated across batches; padding positions (with any logits) are left out."""
    first = ([LABELS[0]], [LOGITS[0]])
    second = ([LABELS[1]], [LOGITS[1]])
    log_probs = []
    for label_row, logit_row in zip(LABELS, LOGITS):
        for label, logits_at in zip(label_row, logit_row):
            if label != PAD:
                log_probs.append(log_softmax_by_hand(logits_at)[label])
    expected = sum(log_probs) / len(log_probs)
    assert metric_value(NegLogPerplexity(), [first, second]) == pytest.approx(expected, rel=1e-5)

    # The second batch's all-zero logits give log p = -ln 4 at that position, by hand.
    assert log_probs[3] == pytest.approx(-math.log(4))


def test_target_tokens_counts_real_tokens():
    """The throughput counter counts 5 real target tokens in the batch, not 6 positions."""
    assert metric_value(TargetTokens(), [(LABELS, LOGITS)]) == 5.0


def test_loss_config_round_trip():
    """The loss keeps ε through get_config (a compiled model's config carries it)."""
    loss = LabelSmoothedCrossEntropy(0.2)
    restored = LabelSmoothedCrossEntropy.from_config(loss.get_config())
    assert restored.smoothing == 0.2
