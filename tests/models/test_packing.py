"""Packed rows (several pairs end to end, `pair_packing`): the model gives every pair the logits,
loss and gradients it gets in an ordinary padded batch, no attention crosses a pair boundary,
and positions restart at each pair."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from t2t_repro.data.pair_packing import pack_pairs
from t2t_repro.hparams import create_hparams
from t2t_repro.layers.positional import sinusoidal_position_encoding
from t2t_repro.models.transformer import Transformer
from t2t_repro.training.losses import smoothed_loss_and_nll, token_mask
from t2t_repro.training.update_stats import length_moments

VOCAB = 29
# Sources and targets end in EOS (1); lengths chosen so that rows of 12 hold 2 or 3 pairs.
PAIRS = [([5, 7, 9, 1], [6, 3, 8, 1]), ([4, 2, 1], [9, 9, 2, 4, 11, 1]),
         ([12, 6, 3, 8, 5, 1], [7, 1]), ([3, 1], [5, 6, 1]), ([8, 8, 4, 9, 10, 2, 1], [4, 1])]


def padded(pairs):
    """The ordinary batch: one pair per row, 0-padded to the longest."""
    features = {}
    for side, column in (("inputs", 0), ("targets", 1)):
        length = max(len(pair[column]) for pair in pairs)
        features[side] = np.array([pair[column] + [0] * (length - len(pair[column]))
                                   for pair in pairs], np.int32)
    return features


def per_pair(packed, values):
    """`values` [rows, t, ...] of a packed batch, cut back into one array per pair in order."""
    out = []
    for row in range(len(packed["targets"])):
        segments = packed["targets_segmentation"][row]
        for segment in range(1, segments.max() + 1):
            out.append(values[row][segments == segment])
    return out


def pair_order(packed):
    """The pairs' indices in the order `per_pair` lists them (rows may hold them out of order)."""
    order = []
    for row in range(len(packed["targets"])):
        segments = packed["targets_segmentation"][row]
        for segment in range(1, segments.max() + 1):
            target = packed["targets"][row][segments == segment].tolist()
            source = packed["inputs"][row][packed["inputs_segmentation"][row] == segment].tolist()
            order.append(PAIRS.index((source, target)))
    return order


def model_of(position_encoding, seed=3, fused_attention=False):
    keras.utils.set_random_seed(seed)
    hparams = create_hparams("transformer_tiny", f"layer_prepostprocess_dropout=0,"
                             f"position_encoding={position_encoding},max_length=16,"
                             f"fused_attention={fused_attention}")
    return Transformer(hparams, VOCAB, VOCAB).build_weights()


def loss_and_gradients(model, features):
    """The training step's loss (label-smoothed, mean over real target tokens) and gradients."""
    with tf.GradientTape() as tape:
        logits = model(features)
        losses, _ = smoothed_loss_and_nll(features["targets"], logits, 0.1)
        mask = token_mask(features["targets"])
        loss = ops.sum(losses * mask) / ops.sum(mask)
    return float(loss), [tf.convert_to_tensor(g).numpy()
                         for g in tape.gradient(loss, model.trainable_variables)]


def test_packing_fills_rows_first_fit_and_numbers_each_pair():
    packed = pack_pairs(PAIRS, 12)
    # Worked by hand, (source, target) lengths: pair 0 (4, 4) opens row 0; pair 1 (3, 6) joins
    # it, making (7, 10); pair 2 (6, 2) would make row 0's sources 13: row 1; pair 3 (2, 3)
    # would make row 0's targets 13, so it joins row 1, making (8, 5); pair 4 (7, 2) fits
    # neither (14, 15 sources): row 2.
    np.testing.assert_array_equal(packed["inputs_segmentation"],
                                  [[1] * 4 + [2] * 3 + [0] * 5,
                                   [1] * 6 + [2] * 2 + [0] * 4,
                                   [1] * 7 + [0] * 5])
    np.testing.assert_array_equal(packed["targets_position"][0],
                                  [0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 0, 0])
    np.testing.assert_array_equal(packed["targets"][1], [7, 1, 5, 6, 1] + [0] * 7)


def test_a_pair_longer_than_a_row_is_refused():
    with pytest.raises(ValueError, match="pair 1 has 3 source and 6 target tokens"):
        pack_pairs(PAIRS[:2], 5)


@pytest.mark.parametrize("position_encoding", ["sinusoidal", "learned"])
def test_packed_rows_give_each_pair_its_unpacked_logits_loss_and_gradients(position_encoding):
    model = model_of(position_encoding)
    packed = pack_pairs(PAIRS, 12)
    unpacked = padded(PAIRS)
    packed_logits = per_pair(packed, ops.convert_to_numpy(model(packed)))
    unpacked_logits = ops.convert_to_numpy(model(unpacked))
    for pair, logits in zip(pair_order(packed), packed_logits):
        length = len(PAIRS[pair][1])
        np.testing.assert_allclose(logits, unpacked_logits[pair, :length], atol=1e-5)
    packed_loss, packed_gradients = loss_and_gradients(model, packed)
    unpacked_loss, unpacked_gradients = loss_and_gradients(model, unpacked)
    assert abs(packed_loss - unpacked_loss) <= 1e-6
    for packed_gradient, unpacked_gradient in zip(packed_gradients, unpacked_gradients):
        np.testing.assert_allclose(packed_gradient, unpacked_gradient, atol=1e-5)


@pytest.mark.parametrize("batch", ["packed", "padded"])
def test_fused_attention_gives_the_explicit_attentions_logits_loss_and_gradients(batch):
    """`fused_attention` computes the same model: same seed, same weights, same numbers on a
    packed batch (segment masks) and an ordinary padded one (padding and causal masks)."""
    features = pack_pairs(PAIRS, 12) if batch == "packed" else padded(PAIRS)
    explicit, fused = model_of("sinusoidal"), model_of("sinusoidal", fused_attention=True)
    np.testing.assert_allclose(ops.convert_to_numpy(fused(features)),
                               ops.convert_to_numpy(explicit(features)), atol=1e-5)
    fused_loss, fused_gradients = loss_and_gradients(fused, features)
    explicit_loss, explicit_gradients = loss_and_gradients(explicit, features)
    assert abs(fused_loss - explicit_loss) <= 1e-6
    for fused_gradient, explicit_gradient in zip(fused_gradients, explicit_gradients):
        np.testing.assert_allclose(fused_gradient, explicit_gradient, atol=1e-5)


def test_no_attention_crosses_a_pair_boundary():
    model = model_of("sinusoidal")
    packed = pack_pairs(PAIRS, 12)
    scores = model.attention_weights(packed)
    source, target = packed["inputs_segmentation"], packed["targets_segmentation"]
    boundaries = {  # [rows, queries, keys]: True where query and key are of different pairs
        "encoder": source[:, :, None] != source[:, None, :],
        "self": target[:, :, None] != target[:, None, :],
        "cross": target[:, :, None] != source[:, None, :],
    }
    for name, weights in scores.items():
        parts = weights.items() if isinstance(weights, dict) else [("encoder", weights)]
        for kind, part in parts:
            crossing = np.broadcast_to(boundaries[kind][:, None], part.shape)
            assert np.all(ops.convert_to_numpy(part)[crossing] == 0.0), (name, kind)


def test_positions_restart_at_each_pair():
    model = model_of("sinusoidal")
    packed = pack_pairs(PAIRS, 12)
    embedded = ops.convert_to_numpy(model.encoder_position(
        ops.zeros((1, 12, 64)), positions=packed["inputs_position"][:1]))
    table = ops.convert_to_numpy(sinusoidal_position_encoding(12, 64))
    np.testing.assert_array_equal(embedded[0, :7], table[[0, 1, 2, 3, 0, 1, 2]])


def test_a_packed_batch_reports_the_length_moments_of_its_pairs():
    """The FLOP count's Σ s, Σ s², Σ t², Σ s·t go over pairs, not rows."""
    packed, unpacked = pack_pairs(PAIRS, 12), padded(PAIRS)
    moments = [float(m) for m in length_moments(packed, token_mask(packed["targets"]))]
    sources, targets = (np.array([len(pair[side]) for pair in PAIRS]) for side in (0, 1))
    expected = [sources.sum(), (sources**2).sum(), (targets**2).sum(), (sources * targets).sum()]
    assert moments == expected
    assert [float(m) for m in length_moments(unpacked, token_mask(unpacked["targets"]))] == expected
