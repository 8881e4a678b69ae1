"""The decoder's kernels laid out [units, inputs] once per batch for TensorFlow's decoding loop
(`layers.dense_layout`, `Transformer.decoding_kernels`) against the kernels as stored: the same
logits, caches, hypotheses and scores; and where the search lays them out. The CPU check is
set by each test, so that both layouts run on every machine."""

import numpy as np
import pytest
import tensorflow as tf
from keras import ops
from test_beam_search import MODEL_VOCAB, _model

from t2t_repro.decoding.ensemble import Ensemble
from t2t_repro.decoding.precision import model_in_precision
from t2t_repro.decoding.transformer_search import TransformerBeamSearch
from t2t_repro.models import transformer as transformer_module
from t2t_repro.names import EOS_ID
from t2t_repro.utils.cpu import lacks_avx512

pytestmark = pytest.mark.filterwarnings("ignore:You are using a softmax over axis -1")


def _on_x86_without_avx512(monkeypatch, answer):
    monkeypatch.setattr(transformer_module, "is_x86_without_avx512", lambda: answer)


def _sources(count, seed=0):
    rng = np.random.default_rng(seed)
    sources = rng.integers(2, MODEL_VOCAB, (count, 7)).astype(np.int32)
    sources[:, -1] = EOS_ID
    return sources


def _recording_kernels(model):
    """Whether each traced `decode_step` of `model` was given laid-out kernels."""
    given, decode_step = [], model.decode_step

    def recording(*args):
        given.append(args[6] is not None)
        return decode_step(*args)

    model.decode_step = recording
    return given


def test_lacks_avx512_reads_the_flags_of_proc_cpuinfo():
    assert lacks_avx512("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n")
    assert not lacks_avx512("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512bw\n")
    assert not lacks_avx512("processor\t: 0\nFeatures\t: fp asimd\n")  # not x86


@pytest.mark.parametrize("overrides", [{}, {"attention_bias": True, "ffn_activation": "swish"}])
def test_a_step_by_the_laid_out_kernels_equals_a_step_by_the_stored_ones(monkeypatch, overrides):
    """Three positions of 3 sentences × 2 hypotheses: logits and both caches agree. Biases
    are random (they start at zero)."""
    _on_x86_without_avx512(monkeypatch, True)
    model = _model(3, **overrides)
    rng = np.random.default_rng(1)
    for variable in model.weights:
        if variable.path.endswith("bias"):
            variable.assign(rng.normal(size=variable.shape).astype("float32"))
    kernels = model.decoding_kernels()
    layer = model.decoder_layers[0]
    np.testing.assert_array_equal(ops.convert_to_numpy(kernels[0]["feed_forward"]["inner"]),
                                  ops.convert_to_numpy(layer.feed_forward.inner_dense.kernel).T)
    assert set(kernels[0]["cross_attention"]) == {"query", "output"}
    memory, memory_mask = model.encode(_sources(3), training=False)
    key_values = model.memory_key_values(memory)
    ids = rng.integers(2, MODEL_VOCAB, (3, 3, 2)).astype(np.int32)
    caches = {layout: model.empty_decode_cache(3, 4, beam_size=2) for layout in (None, "laid")}
    for position in range(3):
        logits = {}
        for layout in caches:
            logits[layout], caches[layout] = model.decode_step(
                ops.convert_to_tensor(ids[position]), position, caches[layout], key_values,
                memory_mask, None, kernels if layout else None)
        np.testing.assert_allclose(*(ops.convert_to_numpy(logits[k]) for k in caches),
                                   atol=1e-5)
    for stored, laid in zip(caches[None]["keys_values"], caches["laid"]["keys_values"]):
        for a, b in zip(stored, laid):
            np.testing.assert_allclose(ops.convert_to_numpy(a), ops.convert_to_numpy(b),
                                       atol=1e-5)


def test_the_search_lays_out_kernels_from_32_hypotheses_and_finds_the_same(monkeypatch):
    """8 sentences × beam 4 use them and decode as the stored kernels do; 7 × 4 do not."""
    model = _model(4, num_decoder_layers=2)
    sources = _sources(8)
    _on_x86_without_avx512(monkeypatch, False)
    stored = TransformerBeamSearch(model, beam_size=4, alpha=0.6, extra_length=4)(sources)
    _on_x86_without_avx512(monkeypatch, True)
    given = _recording_kernels(model)
    search = TransformerBeamSearch(model, beam_size=4, alpha=0.6, extra_length=4)
    laid = search(sources)
    assert given and all(given)
    np.testing.assert_array_equal(laid.ids, stored.ids)
    np.testing.assert_allclose(laid.scores, stored.scores, atol=1e-5)
    given.clear()
    search(sources[:7])
    assert given and not any(given)


def test_an_ensemble_lays_out_every_models_kernels_and_finds_the_same(monkeypatch):
    ensemble = Ensemble([_model(5, num_decoder_layers=1), _model(6, num_decoder_layers=2)])
    sources = _sources(8, seed=2)
    _on_x86_without_avx512(monkeypatch, False)
    stored = TransformerBeamSearch(ensemble, beam_size=4, extra_length=3)(sources)
    _on_x86_without_avx512(monkeypatch, True)
    assert all(kernels is not None for kernels in ensemble.decoding_kernels())
    laid = TransformerBeamSearch(ensemble, beam_size=4, extra_length=3)(sources)
    np.testing.assert_array_equal(laid.ids, stored.ids)
    np.testing.assert_allclose(laid.scores, stored.scores, atol=1e-5)


def test_no_laid_out_kernels_for_xla_an_export_other_cpus_or_fewer_bits(monkeypatch):
    _on_x86_without_avx512(monkeypatch, True)
    model = _model(7, num_decoder_layers=1)
    given = _recording_kernels(model)
    TransformerBeamSearch(model, beam_size=4, extra_length=2, jit_compile=True)(_sources(8))
    export = TransformerBeamSearch(model, beam_size=4, extra_length=2)
    tf.function(export.graph_decode,  # a batch of unknown size, as the exporter traces it
                input_signature=[tf.TensorSpec([None, None], tf.int32)])(_sources(8))
    assert given and not any(given)
    for precision in ("bfloat16", "int8"):
        assert model_in_precision(model, precision).decoding_kernels() is None
    _on_x86_without_avx512(monkeypatch, False)
    assert model.decoding_kernels() is None
