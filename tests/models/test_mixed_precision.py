"""The Transformer under Keras's mixed dtype policies.

Matmuls run in 16 bits; variables, the attention softmax, layer normalization and the logits
stay float32. bfloat16 keeps 8 significant bits (relative rounding 2^-9 ≈ 0.2% per value) and
float16 11 bits, so next-token probabilities of a small model agree with float32's to a few
hundredths at most; a policy silently ignored would agree exactly.
"""

import keras
import numpy as np
import pytest
from keras import ops

from t2t_repro.hparams import create_hparams
from t2t_repro.models.transformer import Transformer
from t2t_repro.training.loop import compile_for_training

VOCAB = 12
FEATURES = {
    "inputs": np.array([[3, 4, 5, 6, 1, 0, 0], [7, 8, 1, 0, 0, 0, 0]], "int32"),
    "targets": np.array([[4, 5, 6, 1, 0], [9, 1, 0, 0, 0]], "int32"),
}
MIXED = ["mixed_bfloat16", "mixed_float16"]


def model_with_policy(policy, weights=None, hparams="layer_prepostprocess_dropout=0.0"):
    keras.utils.set_random_seed(3)
    model = Transformer(create_hparams("transformer_tiny", hparams), VOCAB, VOCAB,
                        dtype=policy).build_weights()
    if weights is not None:
        model.set_weights(weights)
    return model


def probabilities(model):
    logits = model(FEATURES, training=False)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    return ops.convert_to_numpy(ops.softmax(logits, axis=-1))


@pytest.mark.parametrize("policy", MIXED)
def test_low_precision_matmuls_float32_variables_and_logits(policy):
    full = model_with_policy("float32")
    mixed = model_with_policy(policy, full.get_weights())
    compute = policy.removeprefix("mixed_")
    dense_layers = [layer for layer in mixed._flatten_layers()
                    if isinstance(layer, keras.layers.Dense)]
    assert dense_layers and all(layer.compute_dtype == compute for layer in dense_layers)
    assert all(keras.backend.standardize_dtype(v.dtype) == "float32" for v in mixed.weights)
    expected, actual = probabilities(full), probabilities(mixed)
    assert np.isfinite(actual).all()
    np.testing.assert_allclose(actual.sum(-1), 1.0, rtol=1e-6)
    difference = np.abs(actual - expected).max()
    assert 0 < difference < 0.03, difference


@pytest.mark.parametrize("policy", MIXED)
def test_attention_weights_are_float32_and_masked_rows_stay_finite(policy):
    """Padded source positions get weight 0 and the weights sum to 1 in float32, even in
    float16, whose range cannot hold the mask's -1e9."""
    model = model_with_policy(policy)
    scores = {}
    model.encode(FEATURES["inputs"], attention_scores=scores)
    weights = ops.convert_to_numpy(next(iter(scores.values())))
    assert weights.dtype == np.float32 and np.isfinite(weights).all()
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)
    padded_keys = (FEATURES["inputs"] == 0)[:, None, None, :]  # [batch, 1, 1, source]
    assert (weights * padded_keys).max() == 0.0


def test_a_float16_training_checkpoint_loads_into_a_float32_model(tmp_path):
    """Training under mixed_float16 saves float32 weights and a loss-scale optimizer; the
    float32 inference model, compiled with the same hparams, loads them exactly."""
    hparams = create_hparams("transformer_tiny", "dtype_policy=mixed_float16")
    trained = compile_for_training(model_with_policy("mixed_float16"), hparams)
    path = str(tmp_path / "ckpt-0.weights.h5")
    trained.save_weights(path)
    inference = compile_for_training(model_with_policy("float32"), hparams)
    inference.load_weights(path)
    for saved, loaded in zip(trained.get_weights(), inference.get_weights()):
        np.testing.assert_array_equal(saved, loaded)
    assert inference.compute_dtype == "float32"
