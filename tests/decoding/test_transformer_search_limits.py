"""Beam search within a learned position table (Table 3 row E): sources are padded to
multiples of SHAPE_MULTIPLE (16), but never past the table's `max_length` rows, outputs stop
at `max_length` tokens, and a longer source is an error naming the limit before any work."""

import keras
import numpy as np
import pytest

from t2t_repro.decoding.transformer_search import (
    SHAPE_MULTIPLE,
    TransformerBeamSearch,
    padded_length,
)
from t2t_repro.hparams import create_hparams
from t2t_repro.models.transformer import Transformer

VOCAB = 29
MAX_LENGTH = 20  # not a multiple of SHAPE_MULTIPLE: padding to 32 would overrun the table


def _model(position_encoding):
    hparams = create_hparams(
        "transformer_tiny",
        f"layer_prepostprocess_dropout=0.0,num_hidden_layers=1,max_length={MAX_LENGTH},"
        f"position_encoding={position_encoding}",
    )
    keras.utils.set_random_seed(0)
    return Transformer(hparams, VOCAB, VOCAB).build_weights()


def _sources(*lengths):
    """0-padded sources of the given lengths, tokens 2.. (never EOS=1 or padding)."""
    batch = np.zeros((len(lengths), max(lengths)), np.int32)
    for row, length in enumerate(lengths):
        batch[row, :length] = 2 + np.arange(length) % (VOCAB - 2)
    return batch


def test_padding_is_capped_at_the_table_size():
    assert SHAPE_MULTIPLE == 16 and MAX_LENGTH % SHAPE_MULTIPLE
    assert padded_length(3) == padded_length(3, MAX_LENGTH) == 16
    assert padded_length(18) == 32 and padded_length(18, MAX_LENGTH) == 20
    assert padded_length(20, MAX_LENGTH) == 20


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("lengths", [(3,), (3, 18), (20,)])
def test_learned_positions_decode_sources_up_to_max_length(lengths, use_cache):
    """Sources of up to 20 tokens decode; every output is capped at max_length=20 tokens even
    though source length + extra_length (50) is longer, and forced to full length it is
    exactly 20."""
    model = _model("learned")
    search = TransformerBeamSearch(model, beam_size=2, extra_length=50, use_cache=use_cache,
                                   force_max_length=True)
    sources = _sources(*lengths)
    np.testing.assert_array_equal(search.max_lengths(sources), [MAX_LENGTH] * len(lengths))
    output = search(sources)
    assert output.ids.shape == (len(lengths), 2, MAX_LENGTH)
    assert np.all(output.ids != 0)  # every hypothesis runs to the cap, none beyond


def test_extra_padding_columns_past_the_table_are_not_an_error():
    """Width 30 of which only 5 columns hold tokens: the real source fits the table."""
    model = _model("learned")
    sources = np.pad(_sources(5), ((0, 0), (0, 25)))
    output = TransformerBeamSearch(model, beam_size=2, extra_length=3)(sources)
    assert output.ids.shape[-1] <= 8


@pytest.mark.parametrize("use_cache", [True, False])
def test_source_longer_than_the_table_is_an_error_naming_max_length(use_cache, monkeypatch):
    model = _model("learned")
    encode_calls = []
    monkeypatch.setattr(model, "encode", lambda *args, **kwargs: encode_calls.append(args))
    search = TransformerBeamSearch(model, beam_size=2, use_cache=use_cache)
    with pytest.raises(ValueError, match=r"source has 21 positions.*max_length=20"):
        search(_sources(4, 21))
    assert not encode_calls  # raised before any computation


def test_requested_output_length_past_the_table_is_an_error():
    search = TransformerBeamSearch(_model("learned"), beam_size=2)
    with pytest.raises(ValueError, match=r"21 positions.*max_length=20"):
        search(_sources(4), max_lengths=[21])


def test_sinusoidal_models_have_no_length_limit():
    """The same hparams with sinusoids: max_length plays no part in decoding."""
    model = _model("sinusoidal")
    assert model.max_positions is None
    search = TransformerBeamSearch(model, beam_size=2, extra_length=10, force_max_length=True)
    sources = _sources(21, 3)
    np.testing.assert_array_equal(search.max_lengths(sources), [31, 13])
    assert search(sources).ids.shape == (2, 2, 31)
