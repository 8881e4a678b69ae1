"""Label-smoothed cross-entropy and the token metrics against hand computations (paper §5.4)."""

import math

import keras
import numpy as np
import pytest

from t2t_repro.training.losses import (
    LabelSmoothedCrossEntropy,
    NegLogPerplexity,
    TokenAccuracy,
    TokenMeanLoss,
    smoothed_target_entropy,
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
    """Mean over non-padding tokens of KL(q || p) = Σ_v q_v (log q_v - log p_v) with q = 1-ε on
    the true token and ε/(V-1) on each other token, written out token by token."""
    total, count = 0.0, 0
    for label_row, logit_row in zip(labels, logits):
        for label, logits_at in zip(label_row, logit_row):
            if label == PAD:
                continue
            log_p = log_softmax_by_hand(logits_at)
            q = [1 - epsilon if v == label else epsilon / (vocab - 1) for v in range(vocab)]
            total += sum(q_v * (math.log(q_v) - lp) for q_v, lp in zip(q, log_p) if q_v > 0)
            count += 1
    return total / count


def numpy_smoothed_kl(labels, logits, epsilon):
    """NumPy reference: the explicit smoothed target q [tokens, V] (one-hot scaled, plus ε/(V-1)
    off the label), KL(q || softmax(logits)) per token, averaged over non-padding tokens."""
    labels = np.asarray(labels).reshape(-1)
    logits = np.asarray(logits, np.float64).reshape(len(labels), -1)
    vocab = logits.shape[1]
    q = np.full(logits.shape, epsilon / (vocab - 1))
    q[np.arange(len(labels)), labels] = 1 - epsilon
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    kl = (q * (np.log(q) - log_p)).sum(axis=1)
    real = labels != PAD
    return kl[real].mean()


def loss_value(epsilon, labels, logits):
    loss = LabelSmoothedCrossEntropy(epsilon)(
        np.array(labels, "int32"), np.array(logits, "float32")
    )
    return float(keras.ops.convert_to_numpy(loss))


def metric_value(metric, batches):
    for labels, logits in batches:
        metric.update_state(np.array(labels, "int32"), np.array(logits, "float32"))
    return float(keras.ops.convert_to_numpy(metric.result()))


@pytest.mark.parametrize("epsilon", [0.1, 0.2])
def test_loss_is_kl_divergence_from_an_explicit_smoothed_target(epsilon):
    """A random batch over 11 tokens with padding: the library's loss equals the NumPy KL
    divergence computed from an explicitly built target matrix q (rows summing to 1)."""
    rng = np.random.default_rng(3)
    labels = rng.integers(1, 11, size=(3, 5))
    labels[0, 3:] = PAD
    labels[2, 1:] = PAD
    logits = rng.normal(size=(3, 5, 11)) * 3
    expected = numpy_smoothed_kl(labels, logits, epsilon)
    assert loss_value(epsilon, labels.tolist(), logits) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("epsilon", [0.1, 0.3])
def test_loss_is_zero_when_the_model_predicts_the_smoothed_target(epsilon):
    """Logits log q (q: 1-ε on the label, ε/(V-1) elsewhere) give p = q and a loss of 0, the
    minimum; tensor2tensor reports the same (it subtracts q's entropy)."""
    labels = [[1, 3, 2], [2, PAD, PAD]]
    logits = np.full((2, 3, VOCAB), math.log(epsilon / (VOCAB - 1)), "float32")
    for row, label_row in enumerate(labels):
        for position, label in enumerate(label_row):
            logits[row, position, label] = math.log(1 - epsilon)
    assert loss_value(epsilon, labels, logits) == pytest.approx(0.0, abs=1e-6)


def test_smoothed_target_entropy_at_the_papers_vocabulary():
    """V = 37000, ε = 0.1: H(q) = -0.9 ln 0.9 - 0.1 ln(0.1 / 36999) = 1.376948 nats."""
    closed_form = -0.9 * math.log(0.9) - 0.1 * math.log(0.1 / 36999)
    assert closed_form == pytest.approx(1.376948, abs=1e-6)
    assert smoothed_target_entropy(37000, 0.1) == pytest.approx(closed_form, rel=1e-12)
    # Equal logits over 37000 tokens: the loss is ln 37000 less that constant.
    loss = loss_value(0.1, [[5]], np.zeros((1, 1, 37000), "float32"))
    assert loss == pytest.approx(math.log(37000) - closed_form, rel=1e-5)


def test_label_smoothed_loss_matches_hand_computation():
    """ε = 0.1 on a 2×3 batch with one padding position: the mean over the 5 real tokens of
    Σ q (log q - log softmax(logits))."""
    expected = smoothed_loss_by_hand(LABELS, LOGITS, 0.1)
    assert loss_value(0.1, LABELS, LOGITS) == pytest.approx(expected, rel=1e-5)


def test_label_smoothed_loss_single_token_literal():
    """One token, label 1, logits [0, ln 2, 0, 0]: p = (1/5, 2/5, 1/5, 1/5), q = (1/30, 0.9,
    1/30, 1/30), so loss = 0.9 ln(0.9 / 0.4) + 0.1 ln((1/30) / 0.2) = 0.550661..."""
    logits = [[[0.0, math.log(2.0), 0.0, 0.0]]]
    expected = 0.9 * math.log(0.9 / 0.4) + 0.1 * math.log(1 / 6)
    assert expected == pytest.approx(0.550661, abs=1e-6)
    assert loss_value(0.1, [[1]], logits) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize(
    "epsilon, expected",
    [(0.0, math.log(4)),  # ln V
     # ln V - H(q), H(q) = -(1-ε) ln(1-ε) - ε ln(ε/3)
     (0.1, math.log(4) + 0.9 * math.log(0.9) + 0.1 * math.log(0.1 / 3)),
     (0.2, math.log(4) + 0.8 * math.log(0.8) + 0.2 * math.log(0.2 / 3))],
)
def test_uniform_logits_give_log_vocab_less_target_entropy(epsilon, expected):
    """With equal logits every log p is -ln V and q sums to 1, so the cross-entropy is ln V;
    the loss is that less q's entropy."""
    logits = np.zeros((2, 3, VOCAB), "float32")
    assert loss_value(epsilon, LABELS, logits) == pytest.approx(expected, rel=1e-6)


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


def test_token_mean_loss_weighs_every_token_equally():
    """TokenMeanLoss over two batches of 2 and 5 real tokens is the KL mean over all 7 tokens
    (NumPy), not the mean of the two batch means."""
    rng = np.random.default_rng(7)
    first_labels, first_logits = [[3, 1]], rng.normal(size=(1, 2, VOCAB)) * 2
    second_labels = [[2, 3, 1, PAD], [1, 1, PAD, PAD]]
    second_logits = rng.normal(size=(2, 4, VOCAB)) * 2
    tokens = np.concatenate([np.reshape(first_labels, -1), np.reshape(second_labels, -1)])
    logits = np.concatenate([first_logits.reshape(-1, VOCAB), second_logits.reshape(-1, VOCAB)])
    expected = numpy_smoothed_kl(tokens, logits, 0.1)
    metric = TokenMeanLoss(0.1)
    value = metric_value(metric, [(first_labels, first_logits), (second_labels, second_logits)])
    assert value == pytest.approx(expected, rel=1e-5)
    batch_means = [numpy_smoothed_kl(first_labels, first_logits, 0.1),
                   numpy_smoothed_kl(second_labels, second_logits, 0.1)]
    assert abs(np.mean(batch_means) - expected) > 0.01  # the two means really differ here


def test_loss_config_round_trip():
    """The loss keeps ε through get_config (a compiled model's config carries it)."""
    loss = LabelSmoothedCrossEntropy(0.2)
    restored = LabelSmoothedCrossEntropy.from_config(loss.get_config())
    assert restored.smoothing == 0.2


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
def test_the_gradient_is_the_softmax_less_the_smoothed_target(epsilon):
    """d/dz of Σ w·loss + Σ u·nll (any weights per token, padding's included) equals the NumPy
    closed form (w + u)·softmax(z) - w·q - u·onehot, q the smoothed target, within 1e-6."""
    import tensorflow as tf

    from t2t_repro.training.losses import smoothed_loss_and_nll

    rng = np.random.default_rng(5)
    labels = rng.integers(0, 11, size=(3, 4))
    logits = (rng.normal(size=(3, 4, 11)) * 3).astype("float32")
    loss_weights, nll_weights = rng.normal(size=(2, 3, 4)).astype("float32")
    z = tf.constant(logits)
    with tf.GradientTape() as tape:
        tape.watch(z)
        loss, nll = smoothed_loss_and_nll(tf.constant(labels), z, epsilon)
        total = tf.reduce_sum(loss * loss_weights) + tf.reduce_sum(nll * nll_weights)
    ours = tape.gradient(total, z).numpy()

    shifted = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)
    softmax = np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True)
    one_hot = np.eye(11)[labels]
    q = one_hot * (1 - epsilon) + (1 - one_hot) * epsilon / 10
    expected = ((loss_weights + nll_weights)[..., None] * softmax
                - loss_weights[..., None] * q - nll_weights[..., None] * one_hot)
    np.testing.assert_allclose(ours, expected, atol=1e-6)
