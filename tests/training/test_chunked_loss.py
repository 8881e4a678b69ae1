"""The training loss a chunk of tokens at a time (`chunked_loss_sums`) and the evaluation's sums
(`chunked_sums`) against NumPy's float64 loss and gradient over the whole logits, and the train
step's gradient against automatic differentiation through the model's logits."""

import numpy as np
import pytest
import tensorflow as tf

from step_cases import micro_batch, new_model
from t2t_repro.hparams import HParams, create_hparams
from t2t_repro.training.chunked_loss import (DEFAULT_CHUNK_TOKENS, chunked_loss_sums,
                                             chunked_sums, hparams_chunk_tokens)
from t2t_repro.training.losses import smoothed_loss_and_nll, token_mask

VOCAB, DEPTH, SMOOTHING = 13, 6, 0.1
UPSTREAM = 0.37  # the loss sum enters the loss scaled, as by 1 / the batch's tokens


def numpy_reference(hidden, projection, bias, labels):
    """Loss, nll and correct-prediction sums over the non-padding tokens, and the gradients of
    UPSTREAM × the loss sum: with dz = mask·(softmax - q) per token (q the smoothed target),
    dz·P for the hidden states, dzᵀ·h for the projection and Σ dz for the bias."""
    h = hidden.reshape(-1, DEPTH).astype(np.float64)
    y = labels.reshape(-1)
    mask = (y != 0).astype(np.float64)
    logits = h @ projection.T.astype(np.float64) + bias
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    q = np.full(logits.shape, SMOOTHING / (VOCAB - 1))
    q[np.arange(len(y)), y] = 1 - SMOOTHING
    loss = (q * (np.log(q) - log_p)).sum(axis=-1)
    nll = -log_p[np.arange(len(y)), y]
    correct = (logits.argmax(axis=-1) == y).astype(np.float64)
    dz = UPSTREAM * mask[:, None] * (np.exp(log_p) - q)
    return ({"loss": (loss * mask).sum(), "nll": (nll * mask).sum(),
             "correct": (correct * mask).sum()},
            {"hidden": (dz @ projection).reshape(hidden.shape), "projection": dz.T @ h,
             "bias": dz.sum(axis=0)})


def case(seed, rows, length):
    rng = np.random.default_rng(seed)
    hidden = rng.normal(size=(rows, length, DEPTH)).astype("float32")
    projection = rng.normal(size=(VOCAB, DEPTH)).astype("float32")
    bias = rng.normal(size=VOCAB).astype("float32")
    labels = rng.integers(1, VOCAB, size=(rows, length)).astype("int32")
    labels[0, length // 2:] = 0  # padding
    return hidden, projection, bias, labels


def ours(function, hidden, projection, bias, labels):
    arguments = [tf.constant(a) for a in (hidden, projection, bias)]
    with tf.GradientTape() as tape:
        tape.watch(arguments)
        loss, nll, correct = function(*arguments, tf.constant(labels))
        scaled = UPSTREAM * loss
    gradients = tape.gradient(scaled, arguments)
    return ({"loss": loss, "nll": nll, "correct": correct},
            dict(zip(("hidden", "projection", "bias"), (g.numpy() for g in gradients))))


def assert_equal_to_numpy(sums, gradients, expected_sums, expected_gradients):
    for name, value in sums.items():
        assert float(value) == pytest.approx(expected_sums[name], rel=1e-5), name
    for name, value in gradients.items():
        np.testing.assert_allclose(value, expected_gradients[name], atol=1e-5, err_msg=name)


@pytest.mark.parametrize("chunk_tokens", [1, 4, 15, 1000])  # 15: the tokens exactly
def test_the_sums_and_gradients_equal_numpys_over_the_whole_logits(chunk_tokens):
    """3 × 5 tokens, a chunk size dividing them, not dividing them, and above them."""
    hidden, projection, bias, labels = case(1, 3, 5)
    assert (labels != 0).sum() < labels.size  # padding is left out
    function = lambda h, p, b, y: chunked_loss_sums(h, p, y, SMOOTHING, chunk_tokens, b)
    assert_equal_to_numpy(*ours(function, hidden, projection, bias, labels),
                          *numpy_reference(hidden, projection, bias, labels))


@pytest.mark.parametrize("chunk_tokens", [4, 1000])
def test_one_traced_function_serves_batches_of_every_shape(chunk_tokens):
    """Traced once with unknown rows and lengths, as the trainer traces its step; chunks that
    divide the batches' 14 and 12 positions unevenly, and a chunk above them."""
    spec = [tf.TensorSpec((None, None, DEPTH)), tf.TensorSpec((VOCAB, DEPTH)),
            tf.TensorSpec((VOCAB,)), tf.TensorSpec((None, None), tf.int32)]
    traced = tf.function(
        lambda h, p, b, y: chunked_loss_sums(h, p, y, SMOOTHING, chunk_tokens, b),
        input_signature=spec)
    for seed, rows, length in ((2, 2, 7), (3, 4, 3)):
        hidden, projection, bias, labels = case(seed, rows, length)
        assert_equal_to_numpy(*ours(traced, hidden, projection, bias, labels),
                              *numpy_reference(hidden, projection, bias, labels))


@pytest.mark.parametrize("chunk_tokens", [1, 4, 15, 1000])
def test_the_evaluation_sums_equal_numpys(chunk_tokens):
    """`chunked_sums` (no gradient), eagerly and traced with unknown rows and lengths as
    evaluation compiles it, on 3 × 5 tokens with padding and on 4 × 3."""
    spec = [tf.TensorSpec((None, None, DEPTH)), tf.TensorSpec((VOCAB, DEPTH)),
            tf.TensorSpec((VOCAB,)), tf.TensorSpec((None, None), tf.int32)]
    evaluate = lambda h, p, b, y: chunked_sums(h, p, y, SMOOTHING, chunk_tokens, b)
    for function in (evaluate, tf.function(evaluate, input_signature=spec)):
        for seed, rows, length in ((5, 3, 5), (6, 4, 3)):
            hidden, projection, bias, labels = case(seed, rows, length)
            expected, _ = numpy_reference(hidden, projection, bias, labels)
            sums = function(*(tf.constant(a) for a in (hidden, projection, bias, labels)))
            for name, value in zip(("loss", "nll", "correct"), sums):
                assert float(value) == pytest.approx(expected[name], rel=1e-5), name


def test_the_nll_and_correct_sums_are_reported_without_a_gradient():
    hidden, projection, _, labels = case(4, 2, 3)
    hidden = tf.constant(hidden)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(hidden)
        _, nll, correct = chunked_loss_sums(hidden, tf.constant(projection), labels,
                                            SMOOTHING, 2)
    assert tape.gradient(nll, hidden) is None and tape.gradient(correct, hidden) is None


@pytest.mark.parametrize("overrides", [
    "", "shared_embedding_and_softmax_weights=false,logits_bias=true,normalize_first=true"])
def test_the_models_factors_give_its_logits_and_the_loss_their_gradient(overrides):
    """`project=False` returns what the logits are made of; the chunked loss of them gives the
    weights the gradient that automatic differentiation through the whole logits and
    `smoothed_loss_and_nll` gives (float32, 1e-6 relative and absolute)."""
    hparams = create_hparams("transformer_tiny", ",".join(filter(None, [
        "layer_prepostprocess_dropout=0.0,num_hidden_layers=1", overrides])))
    model = new_model(hparams)
    if hparams.logits_bias:
        model.final_logits_bias.assign(np.linspace(-1, 1, model.target_vocab_size))
    features, targets = micro_batch(0, 5, 7, 9)

    with tf.GradientTape() as tape:
        logits = model(features, training=True)
        losses, _ = smoothed_loss_and_nll(targets, logits, SMOOTHING)
        automatic = tf.reduce_sum(losses * token_mask(targets))
    expected = tape.gradient(automatic, model.trainable_variables)
    with tf.GradientTape() as tape:
        hidden, projection, bias = model(features, training=True, project=False)
        chunked, _, _ = chunked_loss_sums(hidden, projection, targets, SMOOTHING, 4, bias)
    gradients = tape.gradient(chunked, model.trainable_variables)

    assert (bias is not None) == hparams.logits_bias
    products = np.einsum("btd,vd->btv", hidden, projection) + (0 if bias is None else bias)
    np.testing.assert_allclose(products, logits, atol=1e-5)
    assert float(chunked) == pytest.approx(float(automatic), rel=1e-6)
    for ours_, theirs in zip(gradients, expected):
        np.testing.assert_allclose(tf.convert_to_tensor(ours_), tf.convert_to_tensor(theirs),
                                   rtol=1e-6, atol=1e-6)


def test_a_chunk_size_above_the_batchs_positions_is_one_chunk_of_them(monkeypatch):
    """No logits of filler: with chunks of 1,000 positions, a batch of 3 × 5 positions makes
    one chunk of 15 rows, in the training loss and in evaluation alike."""
    from t2t_repro.training import chunked_loss

    rows, chunk_sums = [], chunked_loss._chunk_sums

    def recording_chunk_sums(chunk_hidden, *args):
        rows.append(int(chunk_hidden.shape[0]))
        return chunk_sums(chunk_hidden, *args)

    monkeypatch.setattr(chunked_loss, "_chunk_sums", recording_chunk_sums)
    hidden, projection, bias, labels = (tf.constant(a) for a in case(1, 3, 5))
    chunked_loss_sums(hidden, projection, labels, SMOOTHING, 1000, bias)
    chunked_sums(hidden, projection, labels, SMOOTHING, 1000, bias)
    assert rows == [15, 15]


def test_a_run_saved_before_the_hparam_gets_the_default_chunk_size():
    hparams = create_hparams("transformer_tiny", "loss_chunk_tokens=64")
    assert hparams_chunk_tokens(hparams) == 64
    saved_before = HParams(**{name: value for name, value in hparams.values().items()
                              if name != "loss_chunk_tokens"})
    assert hparams_chunk_tokens(saved_before) == DEFAULT_CHUNK_TOKENS == 1024
