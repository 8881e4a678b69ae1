"""The graph loop dropping done sentences from its batch (`BeamSearch._compacting_loop`) against
the same search keeping every row to the end: the same hypotheses, scores and number of decoded
positions, while the rows the compiled loop runs on shrink."""

import numpy as np
import pytest
from keras import ops
from test_beam_search import MODEL_VOCAB, _model

from t2t_repro.decoding.ensemble import Ensemble
from t2t_repro.decoding.sampling import Sampler
from t2t_repro.decoding.transformer_search import TransformerBeamSearch
from t2t_repro.names import EOS_ID

pytestmark = pytest.mark.filterwarnings("ignore:You are using a softmax over axis -1")


def _sources(count=12, seed=0):
    """`count` sources of 1 to `count` tokens and EOS, in a random order: their maximum output
    lengths (source length + extra_length) differ, so their sentences are done at different
    positions."""
    rng = np.random.default_rng(seed)
    sources = np.zeros((count, count + 1), np.int32)
    for row, length in enumerate(rng.permutation(count) + 1):
        sources[row, :length] = rng.integers(2, MODEL_VOCAB, length)
        sources[row, length] = EOS_ID
    return sources


def _recording_rows(search):
    """The row counts `search`'s compiled loop is called with, one entry per call."""
    counts, loop = [], search.search._loop

    def recording(search_tensors, *args):
        counts.append(int(ops.shape(search_tensors["done"])[0]))
        return loop(search_tensors, *args)

    search.search._loop = recording
    return counts


def _both(model, sources, **options):
    """(output dropping done sentences, output keeping every row, the first's row counts)."""
    dropping = TransformerBeamSearch(model, extra_length=4, **options)
    counts = _recording_rows(dropping)
    kept = TransformerBeamSearch(model, extra_length=4, drop_done=False, **options)
    return dropping(sources), kept(sources), counts


@pytest.mark.parametrize("beam_size, alpha", [(4, 0.6), (1, 0.0), (3, 1.0)])
def test_dropping_done_sentences_changes_no_output(beam_size, alpha):
    model = _model(2, num_encoder_layers=1, num_decoder_layers=2)
    dropping, kept, counts = _both(model, _sources(), beam_size=beam_size, alpha=alpha)
    np.testing.assert_array_equal(dropping.ids, kept.ids)
    np.testing.assert_allclose(dropping.scores, kept.scores, atol=1e-5)
    assert dropping.steps == kept.steps
    assert counts[0] == 12 and len(counts) > 1
    # Each return to the host follows at least a quarter of the rows being done.
    assert all(later <= count - max(count // 4, 1) for count, later in zip(counts, counts[1:]))


def test_the_loop_returns_each_time_a_quarter_of_its_sentences_are_done():
    """Forced to their maximum lengths, the 16 sentences are done at 16 different positions:
    back on the host after 4 of 16, 3 of 12 and 2 of 9; the last 7, fewer than 8, finish in
    one last call."""
    model = _model(2, num_encoder_layers=1, num_decoder_layers=1)
    dropping, kept, counts = _both(model, _sources(16, seed=4), beam_size=2,
                                   force_max_length=True)
    np.testing.assert_array_equal(dropping.ids, kept.ids)
    np.testing.assert_allclose(dropping.scores, kept.scores, atol=1e-5)
    assert counts == [16, 12, 9, 7]


def test_dropping_done_sentences_keeps_each_sentences_target_prefix():
    model = _model(3, num_encoder_layers=1, num_decoder_layers=1)
    sources = _sources(10, seed=1)
    prefixes = np.zeros((10, 2), np.int32)
    prefixes[::2] = [[5, 6]]
    prefixes[1::4, 0] = 7
    outputs, counts = [], []
    for drop_done in (True, False):
        search = TransformerBeamSearch(model, beam_size=2, extra_length=4, drop_done=drop_done)
        counts.append(_recording_rows(search))
        outputs.append(search(sources, target_prefix=prefixes))
    np.testing.assert_array_equal(outputs[0].ids, outputs[1].ids)
    np.testing.assert_allclose(outputs[0].scores, outputs[1].scores, atol=1e-5)
    assert len(counts[0]) > 1 and counts[1] == [10]
    for row, prefix in enumerate(prefixes):
        forced = prefix[prefix != 0]
        np.testing.assert_array_equal(outputs[0].ids[row, :, : len(forced)],
                                      np.broadcast_to(forced, (2, len(forced))))


def test_an_ensemble_drops_done_sentences_from_every_models_cache():
    first = _model(4, num_encoder_layers=1, num_decoder_layers=1)
    second = _model(5, num_encoder_layers=1, num_decoder_layers=2)
    dropping, kept, counts = _both(Ensemble([first, second]), _sources(10, seed=2),
                                   beam_size=2)
    np.testing.assert_array_equal(dropping.ids, kept.ids)
    np.testing.assert_allclose(dropping.scores, kept.scores, atol=1e-5)
    assert counts[0] == 10 and len(counts) > 1


@pytest.mark.parametrize("options", [dict(jit_compile=True),
                                     dict(beam_size=1, sampler=Sampler(temperature=1.0), seed=3)],
                         ids=["xla", "sampling"])
def test_xla_and_sampling_keep_every_row(options):
    """XLA would compile the loop again for every new row count; a sampler's draws depend on
    the batch's rows."""
    search = TransformerBeamSearch(_model(6, num_encoder_layers=1, num_decoder_layers=1),
                                   extra_length=4, **options)
    counts = _recording_rows(search)
    search(_sources(12, seed=3))
    assert counts == [12]
