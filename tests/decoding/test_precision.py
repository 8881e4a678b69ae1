"""Copies of a model for decoding in less than 32 bits (`decoding.precision`): they compute the
float32 model's function within the precision's rounding, leave the model as it was, and hold
what the precision says (bfloat16 weights and compute; int8 kernels in every Dense layer)."""

import keras
import ml_dtypes
import numpy as np
import pytest
from keras import ops

from t2t_repro.decoding.precision import model_in_precision
from t2t_repro.hparams import create_hparams
from t2t_repro.models.transformer import Transformer

VOCAB = 50


@pytest.fixture(scope="module")
def model_and_batch():
    keras.utils.set_random_seed(2)
    model = Transformer(create_hparams("transformer_tiny", "layer_prepostprocess_dropout=0"),
                        VOCAB, VOCAB).build_weights()
    rng = np.random.default_rng(0)
    features = {"inputs": rng.integers(2, VOCAB, (3, 7)).astype("int32"),
                "targets": rng.integers(2, VOCAB, (3, 5)).astype("int32")}
    return model, features, ops.convert_to_numpy(model(features))


def test_float32_is_the_model_itself(model_and_batch):
    model, _, _ = model_and_batch
    assert model_in_precision(model, "float32") is model


# bfloat16 keeps 8 significant bits (relative rounding 2^-9 per operation); int8 weights and
# inputs 127 levels per row. Both stay within 3% of the logits' range on this model.
@pytest.mark.parametrize("precision", ["bfloat16", "int8"])
def test_a_copy_computes_the_float32_logits_within_its_rounding(model_and_batch, precision):
    model, features, logits = model_and_batch
    copy = model_in_precision(model, precision)
    copied = ops.convert_to_numpy(ops.cast(copy(features), "float32"))
    difference = np.abs(copied - logits).max() / np.abs(logits).max()
    assert 0 < difference < 0.03, difference
    np.testing.assert_array_equal(ops.convert_to_numpy(model(features)), logits)


def layer_paths(weights):
    """Each weight's path below its model's name (a copy's model has another name)."""
    return [weight.path.split("/", 1)[1] for weight in weights]


def test_the_bfloat16_copy_holds_each_weight_rounded_to_bfloat16(model_and_batch):
    """Round to nearest even, as NumPy's bfloat16 (ml_dtypes) rounds: half the bytes to read."""
    model, _, _ = model_and_batch
    copy = model_in_precision(model, "bfloat16")
    assert copy.compute_dtype == "bfloat16"
    assert layer_paths(copy.weights) == layer_paths(model.weights)
    for ours, theirs in zip(copy.get_weights(), model.get_weights()):
        assert ours.dtype == ml_dtypes.bfloat16
        np.testing.assert_array_equal(ours, theirs.astype(ml_dtypes.bfloat16))


def test_the_bfloat16_copy_computes_what_mixed_bfloat16_computes(model_and_batch):
    """mixed_bfloat16 rounds the same float32 weights to bfloat16 at every read, and computes
    the same operations in the same dtypes: the logits are equal. (Layer normalization's
    gains and biases are its 1s and 0s here, which bfloat16 holds exactly; trained ones are
    rounded once in the copy, where mixed_bfloat16 reads them in float32.)"""
    model, features, _ = model_and_batch
    mixed = Transformer(model.hparams, VOCAB, VOCAB, dtype="mixed_bfloat16").build_weights()
    mixed.set_weights(model.get_weights())
    np.testing.assert_array_equal(
        ops.convert_to_numpy(model_in_precision(model, "bfloat16")(features)),
        ops.convert_to_numpy(mixed(features)))


def test_the_int8_copy_holds_int8_kernels(model_and_batch):
    model, _, _ = model_and_batch
    quantized = model_in_precision(model, "int8")
    dense = [layer for layer in quantized._flatten_layers()
             if isinstance(layer, keras.layers.Dense)]
    assert dense and all(layer.quantization_mode == "int8" for layer in dense)
    assert all(ops.convert_to_numpy(layer._kernel).dtype == np.int8 for layer in dense)
    assert all(not getattr(layer, "quantization_mode", None)
               for layer in model._flatten_layers())


def test_an_unknown_precision_is_an_error_naming_the_choices(model_and_batch):
    with pytest.raises(ValueError, match="float32, bfloat16, int8"):
        model_in_precision(model_and_batch[0], "float16")


def test_an_ensembles_copy_is_the_ensemble_of_its_members_copies(model_and_batch):
    from t2t_repro.decoding.ensemble import Ensemble

    model, features, _ = model_and_batch
    copy = model_in_precision(Ensemble([model, model], names=["a", "b"]), "bfloat16")
    assert isinstance(copy, Ensemble) and copy.names == ["a", "b"]
    alone = ops.convert_to_numpy(model_in_precision(model, "bfloat16")(features))
    for member in copy.models:
        assert member is not model and member.compute_dtype == "bfloat16"
        np.testing.assert_array_equal(ops.convert_to_numpy(member(features)), alone)
