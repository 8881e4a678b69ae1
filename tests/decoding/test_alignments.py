"""Pharaoh alignments: pieces merged into words, pairs written once, and decode hparams that do
not fit the model refused with the setting named. (Agreement with CTranslate2's attention:
tests/serving/test_ctranslate2_model.py; the decoder's lines: tests/test_decoder.py.)"""

import numpy as np
import pytest

from t2t_repro.decoding import alignments
from t2t_repro.decoding.text_decoding import check_alignments_asked
from t2t_repro.errors import ConfigurationError
from t2t_repro.hparams import HParams, HParamsError


def test_a_word_starts_at_the_first_piece_and_at_each_piece_with_the_word_mark():
    pieces = ["▁Ein", "▁Hund", "e", "s", "▁rennt", ".", "▁"]
    assert alignments.word_indices(pieces) == [0, 1, 1, 1, 2, 2, 3]
    assert alignments.word_indices(["ab", "c", "▁d"]) == [0, 0, 1]


def test_pharaoh_writes_each_pair_once_by_source_then_target():
    assert alignments.pharaoh([(2, 0), (0, 1), (2, 0), (0, 3), (1, 2)]) == "0-1 0-3 1-2 2-0"
    assert alignments.pharaoh([]) == ""


class AttentionModel:
    """A model stand-in of one decoder layer whose cross-attention is `cross`
    ([batch, heads, target, source])."""

    class Layer:
        name = "decoder_layer"

    decoder_layers = [Layer()]

    def __init__(self, cross):
        self.cross = np.asarray(cross, np.float32)
        self.hparams = HParams(num_heads=self.cross.shape[1])

    def encode(self, inputs, training=False):
        return None, None

    def decode(self, inputs, memory, mask, training=False, attention_scores=None):
        attention_scores["decoder_layer"] = {"cross": self.cross}


def test_argmax_leaves_out_the_source_eos_and_padding():
    """The argmax skips EOS (id 1) and padding however much weight they hold, and averages the
    first `heads` heads."""
    # [batch 1, heads 2, target 2, source 4]: source "5 6 EOS pad".
    model = AttentionModel([[
        [[0.1, 0.2, 0.6, 0.1], [0.3, 0.1, 0.6, 0.0]],
        [[0.0, 0.3, 0.7, 0.0], [0.0, 0.5, 0.5, 0.0]],
    ]])
    sources, targets = np.array([[5, 6, 1, 0]]), np.array([[7, 1]])
    assert alignments.attention_argmax(model, sources, targets).tolist() == [[1, 1]]
    assert alignments.attention_argmax(model, sources, targets, heads=1).tolist() == [[1, 0]]


class Pieces:
    def __init__(self, pieces):
        self.pieces = ["<pad>", "</s>", "<unk>"] + pieces

    def all_pieces(self):
        return self.pieces


class SeparateVocabularies:
    """A problem stand-in whose two sides' vocabularies give ids 3 to 5 different pieces."""

    name = "separate"
    source_vocabulary = Pieces(["▁The", "house", "▁red"])  # words 0 0 1
    target_vocabulary = Pieces(["▁Das", "▁rote", "Haus"])  # words 0 1 1


def test_words_of_each_side_come_from_that_sides_vocabulary():
    """Hand-worked: target pieces 0, 1, 2 attend most to source pieces 0, 2, 1; through each
    side's own word starts the pairs are 0-0, 1-1, 0-1 (the source's pieces would give "0-0
    0-1 1-0", the target's "0-0 1-1")."""
    one_hot = np.eye(4, dtype=np.float32)
    model = AttentionModel([[one_hot[[0, 2, 1, 3]]]])  # [1, 1 head, target 4, source 4]
    sources, outputs = [[3, 4, 5, 1]], [[3, 4, 5, 1]]
    asked = alignments.add_alignment_hparams(HParams()).override_from_string(
        "return_alignments=true")
    problem = SeparateVocabularies()
    assert alignments.Aligner(model, problem, asked)(sources, outputs) == ["0-0 1-2 2-1"]
    asked.alignment_unit = "word"
    assert alignments.Aligner(model, problem, asked)(sources, outputs) == ["0-0 0-1 1-1"]


def test_word_alignments_of_a_problem_without_pieces_are_an_error_naming_the_side():
    class NoTargetPieces(SeparateVocabularies):
        target_vocabulary = None

    asked = alignments.add_alignment_hparams(HParams()).override_from_string(
        "return_alignments=true,alignment_unit=word")
    with pytest.raises(ConfigurationError, match="^decode hparam alignment_unit=word needs "
                                                 "SentencePiece vocabularies, and problem "
                                                 "separate has no target one; use "
                                                 "alignment_unit=piece.$"):
        alignments.Aligner(AttentionModel(np.zeros((1, 1, 1, 1))), NoTargetPieces(), asked)


@pytest.mark.parametrize("setting, named", [
    ("alignment_layer=2",
     "alignment_layer=2: the model has 2 decoder layers; use 0 to 1, or -1 for the last.$"),
    ("alignment_layer=-3", "alignment_layer=-3"),
    ("alignment_heads=5", "alignment_heads=5: the model has 4 heads"),
    ("alignment_heads=-1", "alignment_heads=-1"),
    ("alignment_unit=char", "alignment_unit=char: use one of piece, word"),
])
def test_settings_that_do_not_fit_the_model_are_errors(setting, named):
    decode_hparams = alignments.add_alignment_hparams(HParams()).override_from_string(setting)
    with pytest.raises(ConfigurationError, match=named):
        alignments.check_alignment_hparams(decode_hparams, num_layers=2, num_heads=4)
    alignments.check_alignment_hparams(alignments.add_alignment_hparams(HParams()), 2, 4)


@pytest.mark.parametrize("setting", ["alignment_layer=0", "alignment_heads=2,alignment_unit=word"])
def test_alignment_settings_without_alignments_are_an_error_naming_them(setting):
    """The decoder would write no alignments and ignore them."""
    decode_hparams = alignments.add_alignment_hparams(HParams()).override_from_string(setting)
    named = setting.replace(",", ", ")
    with pytest.raises(HParamsError, match=f"^decode hparam {named} applies only with "
                                           f"return_alignments=true; add "):
        check_alignments_asked(decode_hparams)
    decode_hparams.return_alignments = True
    check_alignments_asked(decode_hparams)


def test_every_beam_with_alignments_is_an_error_naming_the_fix():
    """An alignment is the best hypothesis's; the model is not read (there is none here)."""
    decode_hparams = HParams(return_beams=True, return_alignments=True)
    with pytest.raises(ConfigurationError, match="return_alignments and return_beams cannot be "
                                                 "combined: .*; drop return_beams"):
        alignments.Aligner(None, None, decode_hparams)
