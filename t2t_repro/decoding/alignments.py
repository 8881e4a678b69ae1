"""Source-target alignments from the decoder's encoder-decoder attention, in Pharaoh format.

Target piece j aligns to the source piece with the highest attention when j was predicted: the
cross-attention weights of decoder layer `alignment_layer` (-1: the last), averaged over its
first `alignment_heads` heads (0: all), their argmax over the source's pieces (its EOS left
out; the target's EOS gets no pair). A pair is written `i-j` (source i, target j, from 0); with
`alignment_unit=word`, pieces are merged into words (a word starts at a SentencePiece piece
beginning with "▁"), so a word pair is written once however many of its pieces align.

The weights are those of the decoder run teacher-forced on the chosen hypothesis, which are the
weights its cached search steps computed (the cached step equals the full decoder at its
position), so the search itself carries nothing extra. CTranslate2 given the same layer and
heads (`serving.ctranslate2_model`) returns the same argmaxes.
"""

import numpy as np
from keras import ops

from t2t_repro.errors import ConfigurationError, layer_choices
from t2t_repro.models.transformer import shift_right
from t2t_repro.names import EOS_ID, PAD_ID

UNITS = ("piece", "word")
WORD_START = "\u2581"  # SentencePiece's "▁": the piece begins a word


# The decode hparams of alignments and their defaults: off.
ALIGNMENT_DEFAULTS = {"return_alignments": False, "alignment_layer": -1, "alignment_heads": 0,
                      "alignment_unit": "piece"}


def add_alignment_hparams(decode_hparams):
    """The decode hparams of alignments, off by default."""
    for name, value in ALIGNMENT_DEFAULTS.items():
        decode_hparams.add_hparam(name, value)
    return decode_hparams


def check_alignment_hparams(decode_hparams, num_layers, num_heads):
    """ConfigurationError naming the decode hparam when the layer, heads or unit do not fit a
    model of `num_layers` decoder layers of `num_heads` heads."""
    layer, heads = decode_hparams.alignment_layer, decode_hparams.alignment_heads
    if not -num_layers <= layer < num_layers:
        raise ConfigurationError(
            f"decode hparam alignment_layer={layer}: the model has {num_layers} decoder "
            f"layer{'s' if num_layers > 1 else ''}; use {layer_choices(num_layers)}.")
    if not 0 <= heads <= num_heads:
        raise ConfigurationError(
            f"decode hparam alignment_heads={heads}: the model has {num_heads} heads; use 1 to "
            f"{num_heads}, or 0 for all.")
    if decode_hparams.alignment_unit not in UNITS:
        raise ConfigurationError(
            f"decode hparam alignment_unit={decode_hparams.alignment_unit}: use one of "
            f"{', '.join(UNITS)}.")


def attention_argmax(model, sources, targets, layer=-1, heads=0):
    """Each target position's source position of highest attention.

    `sources` [batch, s] (0-padded, EOS included), `targets` [batch, t] (0-padded) ->
    int [batch, t]: the argmax over the source's pieces (not its EOS or padding) of decoder
    layer `layer`'s cross-attention while predicting each target position, averaged over the
    first `heads` heads (0: all).
    """
    sources = np.asarray(sources, np.int32)
    targets = np.asarray(targets, np.int32)
    scores = {}
    memory, memory_mask = model.encode(ops.convert_to_tensor(sources), training=False)
    model.decode(shift_right(ops.convert_to_tensor(targets)), memory, memory_mask,
                 training=False, attention_scores=scores)
    weights = ops.convert_to_numpy(scores[model.decoder_layers[layer].name]["cross"])
    weights = weights.astype(np.float32)[:, : heads or None].mean(axis=1)  # [batch, t, s]
    pieces = (sources != PAD_ID) & (sources != EOS_ID)
    return np.where(pieces[:, None, :], weights, -np.inf).argmax(axis=-1)


def word_indices(pieces):
    """Each piece's word index: a word starts at the first piece and at every piece
    beginning with "▁"."""
    indices, word = [], -1
    for position, piece in enumerate(pieces):
        if position == 0 or piece.startswith(WORD_START):
            word += 1
        indices.append(word)
    return indices


def pharaoh(pairs):
    """`[(i, j), ...]` -> "i-j i-j ..." (each pair once, by source then target index)."""
    return " ".join(f"{i}-{j}" for i, j in sorted(set(pairs)))


def _without_eos(ids):
    ids = [int(i) for i in ids if i != PAD_ID]
    return ids[: ids.index(EOS_ID)] if EOS_ID in ids else ids


class Aligner:
    """Pharaoh alignments of decoded sentences, as the decode hparams say.

    Raises ConfigurationError when `model` is an ensemble (an alignment is one model's
    attention), `return_beams` is asked too (it is the best hypothesis's), `alignment_layer` or
    `alignment_heads` do not fit `model`, the unit is unknown, or `alignment_unit=word` is
    asked of a problem without SentencePiece pieces.
    """

    def __init__(self, model, problem, decode_hparams):
        from t2t_repro.decoding.ensemble import Ensemble

        if isinstance(model, Ensemble):
            raise ConfigurationError(
                "decode hparam return_alignments takes one model's attention, not an "
                "ensemble's: give --checkpoint_path one run or checkpoint.")
        if "return_beams" in decode_hparams and decode_hparams.return_beams:
            raise ConfigurationError(
                "decode hparams return_alignments and return_beams cannot be combined: an "
                "alignment is written for the best hypothesis only; drop return_beams.")
        check_alignment_hparams(decode_hparams, len(model.decoder_layers), model.hparams.num_heads)
        self.model = model
        self.layer = decode_hparams.alignment_layer
        self.heads = decode_hparams.alignment_heads
        self.pieces = None
        if decode_hparams.alignment_unit == "word":
            self.pieces = {side: _side_pieces(problem, side) for side in ("source", "target")}

    def __call__(self, source_id_lists, outputs, batch_size=32):
        """Each source's Pharaoh line for its output ids (the decoded hypothesis, EOS and
        padding allowed), computed `batch_size` sentences at a time."""
        lines = []
        for start in range(0, len(source_id_lists), batch_size):
            sources = [_without_eos(ids) for ids in source_id_lists[start : start + batch_size]]
            targets = [_without_eos(ids) for ids in outputs[start : start + batch_size]]
            argmax = attention_argmax(self.model, _padded([ids + [EOS_ID] for ids in sources]),
                                      _padded([ids + [EOS_ID] for ids in targets]),
                                      self.layer, self.heads)
            lines.extend(self._line(source, target, row)
                         for source, target, row in zip(sources, targets, argmax))
        return lines

    def _line(self, source, target, argmax):
        if not source:
            return ""
        pairs = [(int(argmax[j]), j) for j in range(len(target))]
        if self.pieces is not None:
            source_words = word_indices([self.pieces["source"][i] for i in source])
            target_words = word_indices([self.pieces["target"][i] for i in target])
            pairs = [(source_words[i], target_words[j]) for i, j in pairs]
        return pharaoh(pairs)


def _side_pieces(problem, side):
    """The pieces of the `side`'s SentencePiece vocabulary ("source" or "target"): the two
    differ on a problem with separate vocabularies."""
    vocabulary = getattr(problem, f"{side}_vocabulary", None)
    if not hasattr(vocabulary, "all_pieces"):
        raise ConfigurationError(
            f"decode hparam alignment_unit=word needs SentencePiece vocabularies, and problem "
            f"{problem.name} has no {side} one; use alignment_unit=piece.")
    return vocabulary.all_pieces()


def _padded(id_lists):
    batch = np.full((len(id_lists), max(len(ids) for ids in id_lists)), PAD_ID, np.int32)
    for row, ids in enumerate(id_lists):
        batch[row, : len(ids)] = ids
    return batch
