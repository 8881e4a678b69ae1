"""Scoring given translations: log P(target | source) under a model, teacher-forced.

Every target position's distribution comes from one forward pass of the whole batch (the
decoder reads the target shifted right), not from a step-by-step search. A target's score is
the sum of its pieces' log-probabilities, EOS included, in nats, under the softmax over the
whole vocabulary, as training's loss and CTranslate2's `score_batch` take them. (The beam search
renormalises over the ids it may output, every one but the padding id 0, whose probability a
trained model makes negligible: a hypothesis's score there is higher by -log(1 - P(0)) a step.)
"""

import numpy as np
from keras import ops

from t2t_repro.decoding.compiled import compile_for_backend
from t2t_repro.decoding.transformer_search import padded_length
from t2t_repro.models.transformer import shift_right
from t2t_repro.names import PAD_ID


def output_log_probs(logits):
    """Log-probabilities [..., vocab] in float32: the log-softmax of `logits`."""
    return ops.log_softmax(ops.cast(logits, "float32"), axis=-1)


def graph_score(model, inputs, targets):
    """`inputs` [batch, s], `targets` [batch, t] int32, 0-padded, each ending in EOS ->
    `(scores [batch] float32, lengths [batch] int32)`: each target's summed log-probability
    given its source and its number of pieces (EOS included). Tensor ops only, for tracing
    into a compiled program (an exported SavedModel); `model` is a Transformer or anything
    with its `encode` and `decode` (an `Ensemble`)."""
    memory, memory_mask = model.encode(inputs, training=False)
    logits = model.decode(shift_right(targets), memory, memory_mask, training=False)
    log_probs = ops.take_along_axis(output_log_probs(logits), ops.expand_dims(targets, -1),
                                    axis=-1)[..., 0]
    pieces = targets != PAD_ID
    scores = ops.sum(ops.where(pieces, log_probs, 0.0), axis=1)
    return scores, ops.sum(ops.cast(pieces, "int32"), axis=1)


def _padded_batch(id_lists, width):
    batch = np.full((len(id_lists), width), PAD_ID, dtype=np.int32)
    for row, ids in enumerate(id_lists):
        batch[row, : len(ids)] = ids
    return batch


class Scorer:
    """Scores batches of (source ids, target ids) with `model`, compiled once for the backend;
    sources and targets are padded to multiples of SHAPE_MULTIPLE positions, so that a file of
    many lengths compiles a handful of shapes."""

    def __init__(self, model):
        self.model = model
        self._score = compile_for_backend(lambda inputs, targets: graph_score(model, inputs,
                                                                              targets),
                                          model.variables)

    def __call__(self, source_lists, target_lists):
        """Lists of ids (each ending in EOS) -> `(scores, lengths)` NumPy arrays [batch].
        Raises a ValueError naming hparam max_length when one does not fit a learned position
        table."""
        widths = []
        for what, id_lists in (("source", source_lists), ("target", target_lists)):
            longest = max(len(ids) for ids in id_lists)
            self.model.check_length(longest, what)
            widths.append(padded_length(longest, self.model.max_positions))
        scores, lengths = self._score(_padded_batch(source_lists, widths[0]),
                                      _padded_batch(target_lists, widths[1]))
        return ops.convert_to_numpy(scores), ops.convert_to_numpy(lengths)


def score_id_pairs(scorer, pairs, batch_size, progress=None):
    """`(score, length)` of each `(source ids, target ids)` pair, in order. Pairs are scored in
    batches of `batch_size` sorted by length, so a batch pads little; `progress(done, total)` is
    called after each batch."""
    order = sorted(range(len(pairs)), key=lambda index: (len(pairs[index][1]),
                                                         len(pairs[index][0])))
    results = [None] * len(pairs)
    for start in range(0, len(order), batch_size):
        indices = order[start : start + batch_size]
        scores, lengths = scorer([pairs[index][0] for index in indices],
                                 [pairs[index][1] for index in indices])
        for index, score, length in zip(indices, scores, lengths):
            results[index] = (float(score), int(length))
        if progress is not None:
            progress(min(start + batch_size, len(order)), len(order))
    return results
