"""The graph loop (the whole beam search in one compiled `while_loop`) against the host loop
(a Python loop over the compiled step, the search as it ran before): the same hypotheses, scores
and number of decoded positions on the hand-worked scripts of test_beam_search, on random
Transformers, and through `graph_decode` traced with unknown shapes as the exporter traces it.
"""

import numpy as np
import pytest
import tensorflow as tf
from keras import ops
from test_beam_search import (
    EOS_SECOND_SCRIPT,
    LENGTH_PENALTY_SCRIPT,
    NO_EOS_SCRIPT,
    PADDING_MASS_SCRIPT,
    SOURCES,
    _model,
    _tree_step,
    _tree_tables,
)

from t2t_repro.decoding.beam_search import BeamSearch
from t2t_repro.decoding.transformer_search import TransformerBeamSearch
from t2t_repro.hparams import create_hparams
from t2t_repro.models.transformer import Transformer

pytestmark = pytest.mark.filterwarnings("ignore:You are using a softmax over axis -1")


def _scripted(scripts, max_lengths, loop, beam_size=2, alpha=0.0, force_max_length=False):
    """Beam-searches one script per sentence (the step of test_beam_search's scripts)."""
    log_probs, children, roots = _tree_tables(scripts)
    search = BeamSearch(_tree_step, beam_size, alpha, force_max_length=force_max_length, loop=loop)
    constants = tuple(ops.convert_to_tensor(table)
                      for table in (log_probs, children, np.repeat(roots, beam_size)))
    return search(ops.zeros((len(scripts) * beam_size,), "int32"), constants, max_lengths)


# The settings of test_beam_search's hand-worked cases.
HAND_WORKED_CASES = {
    "alpha_0_short_wins": dict(scripts=[LENGTH_PENALTY_SCRIPT], max_lengths=[10]),
    "alpha_1_long_wins": dict(scripts=[LENGTH_PENALTY_SCRIPT], max_lengths=[10], alpha=1.0),
    "early_stop_at_lp_of_max_length": dict(scripts=[LENGTH_PENALTY_SCRIPT], max_lengths=[16],
                                           alpha=1.0),
    "cut_at_max_length": dict(scripts=[NO_EOS_SCRIPT], max_lengths=[3]),
    "own_max_lengths": dict(scripts=[NO_EOS_SCRIPT, NO_EOS_SCRIPT], max_lengths=[3, 2]),
    "one_stops_early_one_goes_on": dict(scripts=[LENGTH_PENALTY_SCRIPT, NO_EOS_SCRIPT],
                                        max_lengths=[16, 5], alpha=1.0),
    "force_max_length": dict(scripts=[LENGTH_PENALTY_SCRIPT], max_lengths=[3],
                             force_max_length=True),
    "padding_renormalised": dict(scripts=[PADDING_MASS_SCRIPT], max_lengths=[10], alpha=0.6),
    "beam_1_argmax": dict(scripts=[EOS_SECOND_SCRIPT], max_lengths=[10], beam_size=1),
}


@pytest.mark.parametrize("case", HAND_WORKED_CASES.values(), ids=HAND_WORKED_CASES.keys())
def test_graph_loop_equals_host_loop_on_the_hand_worked_scripts(case):
    graph, host = (_scripted(**case, loop=loop) for loop in ("graph", "host"))
    np.testing.assert_array_equal(graph.ids, host.ids)
    np.testing.assert_allclose(graph.scores, host.scores, rtol=1e-6)
    assert graph.steps == host.steps


def test_graph_loop_stops_early_as_worked_by_hand():
    """test_beam_search's worked case: sentence 0 stops after 3 steps, sentence 1 after 4."""
    output = _scripted([LENGTH_PENALTY_SCRIPT, NO_EOS_SCRIPT], [16, 5], "graph", alpha=1.0)
    assert output.steps == 4


@pytest.mark.parametrize("seed, beam_size", [(0, 4), (3, 4), (1, 1)])
def test_transformer_graph_loop_equals_host_loop(seed, beam_size):
    model = _model(seed, num_encoder_layers=1, num_decoder_layers=2)
    graph, host = (TransformerBeamSearch(model, beam_size=beam_size, alpha=0.6, extra_length=4,
                                         loop=loop)(SOURCES) for loop in ("graph", "host"))
    np.testing.assert_array_equal(graph.ids, host.ids)
    np.testing.assert_allclose(graph.scores, host.scores, atol=1e-5)
    assert graph.steps == host.steps


def _traced_graph_decode(search):
    """`search.graph_decode` traced once with unknown batch and source length, as an export."""
    return tf.function(search.graph_decode,
                       input_signature=[tf.TensorSpec([None, None], tf.int32)])


@pytest.mark.parametrize("overrides", [
    dict(position_encoding="sinusoidal"), dict(position_encoding="learned"),
    # Restricted self-attention: its cache, a ring of 3 positions, sized in the graph.
    dict(position_encoding="sinusoidal", self_attention_window=3),
], ids=["sinusoidal", "learned", "restricted_window_3"])
def test_graph_decode_with_unknown_shapes_equals_the_host_call(overrides):
    """Learned positions (max_length 20) cap outputs at the table: extra_length 50 would
    otherwise ask for more."""
    model = _model(2, max_length=20, **overrides)
    search = TransformerBeamSearch(model, beam_size=3, alpha=0.6, extra_length=50)
    expected = search(SOURCES)
    # Extra padding columns change nothing.
    ids, scores = _traced_graph_decode(search)(np.pad(SOURCES, ((0, 0), (0, 7))))
    ids = ops.convert_to_numpy(ids)
    np.testing.assert_array_equal(ids[:, :, : expected.ids.shape[2]], expected.ids)
    assert not ids[:, :, expected.ids.shape[2]:].any()
    np.testing.assert_allclose(ops.convert_to_numpy(scores), expected.scores, atol=1e-5)


def test_the_search_graph_transposes_no_integers():
    """On some CPUs TensorFlow's oneDNN rewrite logs an error line ("oneDNN supports
    DT_INT64 only on platforms with AVX-512") for an integer Transpose it passes over
    (`layers/row_gathers.py`): the search's graph, as an export traces it, with a vocabulary
    wide enough for the top-k in blocks (`logit_reductions.top_k`), holds none."""
    hparams = create_hparams("transformer_tiny", "num_hidden_layers=1")
    model = Transformer(hparams, 3000, 3000).build_weights()
    search = TransformerBeamSearch(model, beam_size=4, alpha=0.6, extra_length=4)
    graph = _traced_graph_decode(search).get_concrete_function().graph.as_graph_def()
    nodes = [*graph.node, *(node for function in graph.library.function
                            for node in function.node_def)]
    transposed = {tf.dtypes.as_dtype(node.attr["T"].type).name for node in nodes
                  if node.op == "Transpose"}
    assert transposed and not any(tf.dtypes.as_dtype(name).is_integer for name in transposed)
