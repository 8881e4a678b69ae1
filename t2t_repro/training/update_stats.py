"""What a training update reports: sums over its global batch's tokens, computed with
keras.ops so that the TensorFlow step and the JAX step report the same figures."""

from typing import NamedTuple

from keras import ops

from t2t_repro.training.losses import token_mask


class UpdateStats(NamedTuple):
    """Sums over one update's global batch, as Python numbers.

    loss_sum: label-smoothed loss summed over the target tokens (divide by target_tokens for
        the update's loss). nll_sum: unsmoothed negative log-likelihood summed likewise.
        correct: target tokens whose argmax prediction is right. target_tokens: non-padding
        target tokens. source_tokens: non-padding source tokens (0 if the inputs are not a
        features dict with "inputs"). source_squares, target_squares, source_target_products:
        Σ s², Σ t², Σ s·t over the sentence pairs' real lengths (s, t), with which a model's
        FLOPs, quadratic in the lengths, add up over the batch. finite: False when the loss
        or a gradient was NaN or infinite.
    """

    loss_sum: float
    nll_sum: float
    correct: float
    target_tokens: float
    source_tokens: float
    source_squares: float
    target_squares: float
    source_target_products: float
    finite: bool

    @classmethod
    def from_sums(cls, sums, finite):
        """From the `STAT_FIELDS` numbers of `batch_stats` (summed over micro-batches)."""
        return cls(*(float(value) for value in sums), finite=bool(finite))


STAT_FIELDS = 8  # the float fields of UpdateStats, in order


def length_moments(features, target_mask):
    """[Σ s, Σ s², Σ t², Σ s·t] over the sentence pairs, from their real source lengths s and
    target lengths t (s = 0 when the inputs are not a features dict with "inputs"); a packed
    row's pairs count one by one."""
    if isinstance(features, dict) and "inputs_segmentation" in features:
        source_lengths, target_lengths = (_segment_lengths(features["inputs_segmentation"]),
                                          _segment_lengths(features["targets_segmentation"]))
    else:
        target_lengths = ops.sum(target_mask, axis=-1)
        if isinstance(features, dict) and "inputs" in features:
            source_lengths = ops.sum(ops.cast(ops.not_equal(features["inputs"], 0), "float32"),
                                     axis=-1)
        else:
            source_lengths = ops.zeros_like(target_lengths)
    return [ops.sum(source_lengths), ops.sum(source_lengths ** 2),
            ops.sum(target_lengths ** 2), ops.sum(source_lengths * target_lengths)]


def _segment_lengths(segmentation):
    """[rows, length] segment ids (0: padding) -> [rows, length]: the length of segment k + 1 at
    column k (a row holds at most `length` segments)."""
    length = ops.shape(segmentation)[1]
    one_hot = ops.one_hot(ops.cast(segmentation, "int32") - 1, length)  # padding: all zeros
    return ops.sum(one_hot, axis=1)


def batch_stats(features, targets, loss_sum, nll_sum, correct):
    """The `STAT_FIELDS` sums of one batch, stacked: the loss sums over its target tokens
    (`chunked_loss.chunked_loss_sums`), the tokens, then length moments."""
    mask = token_mask(targets)
    return ops.stack([loss_sum, nll_sum, correct, ops.sum(mask), *length_moments(features, mask)])
