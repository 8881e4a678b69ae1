"""The Transformer under Keras's mixed dtype policies (`Transformer(..., dtype=policy)`).

Matmuls run in 16 bits; variables, the attention mask and softmax, layer normalization and the
logits stay float32. Tolerances are in units of the unit roundoff u = 2^-p of a p-bit
significand: bfloat16 keeps 8 bits (u = 2^-8 ≈ 0.4%), float16 11 (u = 2^-11 ≈ 0.05%). A value
rounded to 16 bits is off by at most u relative (half an ulp; one ulp is u to 2u of it).
"""

import keras
import numpy as np
import pytest
from keras import ops

from t2t_repro.decoding.transformer_search import TransformerBeamSearch
from t2t_repro.hparams import create_hparams
from t2t_repro.models.transformer import Transformer, shift_right
from t2t_repro.training.run import compile_for_training

# Attention over a single key (the first position) is legitimate here.
pytestmark = pytest.mark.filterwarnings("ignore:You are using a softmax over axis -1")

VOCAB = 29
INPUTS = np.array([[5, 7, 9, 3, 1, 0, 0], [4, 2, 8, 11, 12, 6, 1]], "int32")
TARGETS = np.array([[6, 3, 8, 1, 0, 0], [9, 9, 2, 4, 17, 1]], "int32")
FEATURES = {"inputs": INPUTS, "targets": TARGETS}
MIXED = ["mixed_bfloat16", "mixed_float16"]
COMPUTE_DTYPE = {"mixed_bfloat16": "bfloat16", "mixed_float16": "float16"}
UNIT = {"mixed_bfloat16": 2.0**-8, "mixed_float16": 2.0**-11}


def _model(policy, weights=None, seed=0, overrides=""):
    """transformer_tiny without dropout under `policy`, with `weights` if given."""
    hparams = create_hparams("transformer_tiny", "layer_prepostprocess_dropout=0.0" + overrides)
    keras.utils.set_random_seed(seed)
    model = Transformer(hparams, VOCAB, VOCAB, dtype=policy).build_weights()
    if weights is not None:
        model.set_weights(weights)
    return model


def _dtype(tensor):
    return keras.backend.standardize_dtype(tensor.dtype)


def _np(tensor):
    return ops.convert_to_numpy(tensor).astype("float32")


@pytest.fixture(scope="module")
def float32_model():
    return _model("float32")


@pytest.mark.parametrize("policy", MIXED)
def test_every_sublayer_gets_the_policy_and_every_variable_stays_float32(policy):
    model = _model(policy)
    sublayers = list(model._flatten_layers(include_self=False))
    assert len(sublayers) > 20
    assert {layer.dtype_policy.name for layer in sublayers} == {policy}
    assert all(_dtype(variable) == "float32" for variable in model.variables)
    memory, _ = model.encode(INPUTS)
    assert _dtype(memory) == COMPUTE_DTYPE[policy]
    assert _dtype(model(FEATURES)) == "float32"


@pytest.mark.parametrize("policy", MIXED)
def test_logits_are_close_to_the_float32_models(policy, float32_model):
    """The same weights give logits within 10u of the largest logit (about 25 16-bit roundings
    lie between the embeddings and the logits; independent ones add up like √25 = 5 of
    them; measured 1.5u to 4.9u over 15 tiny models), so next-token probabilities within 5u
    (|Δp| ≤ ½·max|Δz|; measured up to 3.7u). A policy silently ignored would give a difference
    of exactly 0, float32 rounding one of about 2^-24."""
    unit = UNIT[policy]
    expected = _np(float32_model(FEATURES))
    logits = _model(policy, float32_model.get_weights())(FEATURES)
    assert _dtype(logits) == "float32"
    logits = _np(logits)
    relative_error = np.abs(logits - expected).max() / np.abs(expected).max()
    assert unit / 8 < relative_error < 10 * unit, relative_error / unit
    probabilities, expected_probabilities = (
        _np(ops.softmax(values, axis=-1)) for values in (logits, expected)
    )
    assert np.abs(probabilities - expected_probabilities).max() < 5 * unit


@pytest.mark.parametrize("policy", MIXED)
def test_attention_weights_are_float32_and_sum_to_one(policy):
    """Every layer's weights sum to 1 within float32 rounding (16-bit weights would miss by
    about u), and padded source keys get exactly 0."""
    scores = _model(policy).attention_weights(FEATURES)
    weights = [scores[f"encoder_layer_{i}"] for i in range(2)]
    weights += [scores[f"decoder_layer_{i}"][kind] for i in range(2) for kind in ("self", "cross")]
    assert all(_dtype(layer_weights) == "float32" for layer_weights in weights)
    for layer_weights in map(ops.convert_to_numpy, weights):
        np.testing.assert_allclose(layer_weights.sum(-1), 1.0, rtol=0, atol=1e-6)
    padded_keys = (INPUTS == 0)[:, None, None, :]  # [batch, heads, queries, source]
    cross = ops.convert_to_numpy(scores["decoder_layer_0"]["cross"])
    assert np.all(cross * padded_keys == 0.0)


def test_layer_normalization_computes_in_float32_under_bfloat16():
    """Keras's LayerNormalization casts its 16-bit input up, normalises with the float32 gamma
    and beta and rounds only the result: the output is the exact normalization of the
    bfloat16 input, rounded to bfloat16 (within u relative, plus float32 rounding). Computed in
    bfloat16 it would be off by several ulps, by thousands where gamma·x̂ and beta cancel."""
    norm = _model("mixed_bfloat16").encoder_layers[0].self_attention_norm
    rng = np.random.default_rng(0)
    norm.gamma.assign(rng.normal(size=norm.gamma.shape).astype("float32"))
    norm.beta.assign(rng.normal(size=norm.beta.shape).astype("float32"))
    x = ops.cast(rng.normal(3.0, 2.0, size=(3, 5, norm.gamma.shape[0])), "bfloat16")
    output = norm(x)
    assert _dtype(output) == "bfloat16"
    x = ops.convert_to_numpy(x).astype("float64")
    normalized = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + norm.epsilon)
    expected = normalized * _np(norm.gamma) + _np(norm.beta)
    bound = 2.0**-8 * np.abs(expected) + 2.0**-20 * np.abs(expected).max()
    assert np.all(np.abs(_np(output) - expected) <= bound)


def test_float16_with_padding_and_fully_masked_rows_stays_finite():
    """A filler row (source and target all padding) masks every key of its queries; float16
    cannot hold the mask's -1e9, so the mask and softmax must run in float32."""
    features = {
        "inputs": np.concatenate([INPUTS, np.zeros_like(INPUTS[:1])]),
        "targets": np.concatenate([TARGETS, np.zeros_like(TARGETS[:1])]),
    }
    model = _model("mixed_float16")
    assert np.isfinite(_np(model(features))).all()
    scores = model.attention_weights(features)
    for weights in (scores["encoder_layer_0"], scores["decoder_layer_1"]["cross"]):
        weights = ops.convert_to_numpy(weights)
        assert np.isfinite(weights).all()
        np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=0, atol=1e-6)
        assert np.all(weights[:2] * (INPUTS == 0)[:, None, None, :] == 0.0)


@pytest.mark.parametrize("policy", MIXED)
def test_cached_decoding_equals_the_full_forward_pass(policy):
    """Both paths do the same 16-bit operations; only the float32 accumulation order inside
    the matmuls differs, which now and then flips a rounding by one ulp (up to 2u relative),
    so the logits agree within 4u of the largest (measured: 0 to 1.9u over 15 tiny models).
    The cache holds the compute dtype, which the projected keys and values have."""
    model = _model(policy)
    decoder_inputs = ops.convert_to_numpy(shift_right(TARGETS))
    memory, memory_mask = model.encode(INPUTS, training=False)
    full = _np(model.decode(decoder_inputs, memory, memory_mask, training=False))
    memory_key_values = model.memory_key_values(memory)
    cache = model.empty_decode_cache(len(INPUTS), 8)
    assert all(_dtype(tensor) == COMPUTE_DTYPE[policy]
               for pair in cache["keys_values"] for tensor in pair)
    for position in range(decoder_inputs.shape[1]):
        logits, cache = model.decode_step(
            ops.convert_to_tensor(decoder_inputs[:, position]), position, cache,
            memory_key_values, memory_mask,
        )
        assert _dtype(logits) == "float32"
        np.testing.assert_allclose(
            _np(logits), full[:, position], rtol=0, atol=4 * UNIT[policy] * np.abs(full).max(),
            err_msg=f"position {position}",
        )


@pytest.mark.parametrize("policy", MIXED)
def test_beam_search_runs_under_a_mixed_policy(policy):
    """The compiled search loop carries a 16-bit cache; it finds what the search that
    recomputes the whole prefix finds. Scores (log-probabilities over a length penalty ≥ 1)
    agree within 16u: a rounding the two decoders flip differently moves a logit of size
    ≲ 4 by one ulp (≤ 8u) and a log-probability by at most twice that."""
    model = _model(policy, overrides=",normalize_first=true")
    cached, uncached = (
        TransformerBeamSearch(model, beam_size=4, alpha=0.6, extra_length=4,
                              use_cache=use_cache)(INPUTS)
        for use_cache in (True, False)
    )
    np.testing.assert_array_equal(cached.ids, uncached.ids)
    np.testing.assert_allclose(cached.scores, uncached.scores, rtol=0, atol=16 * UNIT[policy])
    assert np.isfinite(cached.scores).all() and np.all(np.diff(cached.scores, axis=1) <= 0)


@pytest.mark.parametrize("policy", MIXED)
def test_a_mixed_training_checkpoint_loads_into_a_float32_model_that_decodes_alike(
    policy, tmp_path
):
    """A checkpoint of a model trained under `policy` (float32 weights, plus the optimizer's
    state: a loss scale under float16) loads into the float32 inference model compiled with
    the same hparams, which then decodes exactly as a float32 model given those weights."""
    hparams = create_hparams("transformer_tiny", f"dtype_policy={policy}")
    trained = compile_for_training(_model(policy, seed=1), hparams)
    path = str(tmp_path / "ckpt.weights.h5")
    trained.save_weights(path)
    inference = compile_for_training(_model("float32", seed=2), hparams)
    assert not np.array_equal(inference.get_weights()[0], trained.get_weights()[0])
    inference.load_weights(path)
    for saved, loaded in zip(trained.get_weights(), inference.get_weights(), strict=True):
        np.testing.assert_array_equal(loaded, saved)
    assert inference.compute_dtype == "float32"
    reference = _model("float32", trained.get_weights())
    for beam_size in (1, 4):
        loaded_output, reference_output = (
            TransformerBeamSearch(model, beam_size=beam_size, alpha=0.6, extra_length=4)(INPUTS)
            for model in (inference, reference)
        )
        np.testing.assert_array_equal(loaded_output.ids, reference_output.ids)
        np.testing.assert_array_equal(loaded_output.scores, reference_output.scores)


def test_config_round_trip_keeps_the_policy():
    model = _model("mixed_bfloat16")
    restored = Transformer.from_config(model.get_config())
    assert restored.dtype_policy.name == "mixed_bfloat16"
    assert restored.get_config() == model.get_config()


def test_unknown_dtype_policy_hparam_is_an_error_naming_the_allowed_values():
    hparams = create_hparams("transformer_tiny", "dtype_policy=mixed_fp16")
    with pytest.raises(ValueError, match="hparam dtype_policy='mixed_fp16' must be one of "
                                         "float32, mixed_bfloat16, mixed_float16."):
        Transformer(hparams, VOCAB, VOCAB)


def test_a_policy_with_16_bit_variables_is_an_error():
    """Pure "bfloat16" would store 16-bit weights, which a float32 model could not share."""
    hparams = create_hparams("transformer_tiny")
    with pytest.raises(ValueError, match="mixed_bfloat16"):
        Transformer(hparams, VOCAB, VOCAB, dtype="bfloat16")
