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


def test_argmax_leaves_out_the_source_eos_and_padding():
    """A model stand-in whose last layer's attention is given: the argmax skips EOS (id 1)
    and padding however much weight they hold, and averages the first `heads` heads."""

    class Layer:
        name = "decoder_layer"

    class Model:
        decoder_layers = [Layer()]

        def encode(self, inputs, training=False):
            return None, None

        def decode(self, inputs, memory, mask, training=False, attention_scores=None):
            # [batch 1, heads 2, target 2, source 4]: source "5 6 EOS pad".
            attention_scores["decoder_layer"] = {"cross": np.array([[
                [[0.1, 0.2, 0.6, 0.1], [0.3, 0.1, 0.6, 0.0]],
                [[0.0, 0.3, 0.7, 0.0], [0.0, 0.5, 0.5, 0.0]],
            ]], np.float32)}

    sources, targets = np.array([[5, 6, 1, 0]]), np.array([[7, 1]])
    assert alignments.attention_argmax(Model(), sources, targets).tolist() == [[1, 1]]
    assert alignments.attention_argmax(Model(), sources, targets, heads=1).tolist() == [[1, 0]]


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
