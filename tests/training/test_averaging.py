"""average_checkpoints on real transformer_tiny checkpoints and on hand-made h5 files."""

import os

import h5py
import keras
import ml_dtypes
import numpy as np
import pytest

from t2t_repro import registry
from t2t_repro.hparams import create_hparams
from t2t_repro.training.averaging import CheckpointLayoutError, average_checkpoints
from t2t_repro.training.run import compile_for_training

VOCAB_SIZE = 12


def compiled_transformer(seed):
    """transformer_tiny, compiled as TensorFlowTrainingRun compiles it, standing in for a
    trained model: every weight (layer norms and biases too, which initialise to constants) and
    the optimizer state (step counter, Adam moments) are drawn from `seed`."""
    registry.import_all()
    hparams = create_hparams("transformer_tiny")
    model = registry.models["transformer"](hparams, VOCAB_SIZE, VOCAB_SIZE).build_weights()
    compile_for_training(model, hparams)
    rng = np.random.default_rng(seed)
    model.optimizer.iterations.assign(100 * (seed + 1))
    for variable in model.weights + model.optimizer.variables:
        if variable is not model.optimizer.iterations:
            variable.assign(rng.normal(size=variable.shape).astype(variable.dtype))
    return model


def numpy_values(variables):
    return [keras.ops.convert_to_numpy(v) for v in variables]


def weights_loaded_from(path):
    """The model weights of a checkpoint, read back through Keras into a fresh model."""
    model = compiled_transformer(seed=99)
    model.load_weights(path)
    return model.get_weights()


def file_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def test_average_of_two_checkpoints_loads_as_the_mean_with_the_newest_optimizer_state(tmp_path):
    """Two independently initialised models saved as checkpoints: the averaged checkpoint loads
    with `load_weights` into a model whose every weight is the numpy mean of the two (as Keras
    reads them back), and whose optimizer state, step counter included, is the newest's."""
    older, newer = str(tmp_path / "ckpt-100.weights.h5"), str(tmp_path / "ckpt-200.weights.h5")
    compiled_transformer(seed=0).save_weights(older)
    newer_model = compiled_transformer(seed=1)
    newer_model.save_weights(newer)
    inputs_before = [file_bytes(older), file_bytes(newer)]

    output = str(tmp_path / "averaged" / "ckpt-200.weights.h5")
    assert average_checkpoints([older, newer], output) == output

    expected = [
        np.mean(np.stack([a, b]).astype(np.float64), axis=0).astype(a.dtype)
        for a, b in zip(weights_loaded_from(older), weights_loaded_from(newer))
    ]
    averaged = compiled_transformer(seed=2)
    averaged.load_weights(output)
    assert len(averaged.get_weights()) == len(expected) > 20
    for got, want, newest in zip(averaged.get_weights(), expected, newer_model.get_weights()):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        assert not np.array_equal(got, newest)
    assert int(keras.ops.convert_to_numpy(averaged.optimizer.iterations)) == 200
    for got, want in zip(numpy_values(averaged.optimizer.variables),
                         numpy_values(newer_model.optimizer.variables)):
        np.testing.assert_array_equal(got, want)

    assert os.listdir(tmp_path / "averaged") == ["ckpt-200.weights.h5"]
    assert [file_bytes(older), file_bytes(newer)] == inputs_before


def write_h5(path, datasets):
    """A hand-made checkpoint: {name: array}; bfloat16 arrays are marked as Keras marks them."""
    with h5py.File(path, "w") as f:
        for name, value in datasets.items():
            dataset = f.create_dataset(name, data=value)
            if value.dtype == ml_dtypes.bfloat16:
                dataset.attrs["dtype"] = "bfloat16"
    return str(path)


def hand_made_checkpoint(path, index):
    """Float weights of three dtypes, an integer model dataset and optimizer variables, all with
    values that depend on `index` and whose means are exact in every dtype."""
    base = np.array([[0.0, 1.0], [2.0, -3.0]]) + 2.0 * index
    return write_h5(path, {
        "dense/vars/0": base.astype(np.float32),
        "dense/vars/1": np.float32(index),
        "half/vars/0": base.astype(np.float16),
        "bf16/vars/0": base.astype(ml_dtypes.bfloat16),
        "seed_generator/vars/0": np.array([7, index], dtype=np.int64),
        "optimizer/vars/0": np.int64(10 * index),
        "optimizer/vars/1": base.astype(np.float32) * 100.0,
    })


def test_float_weights_averaged_in_their_dtype_everything_else_from_the_newest(tmp_path):
    """Over three checkpoints: each float model weight (float32, float16, bfloat16, scalar) is
    the mean in its own dtype; the integer dataset and the optimizer's variables (float ones
    too) are the newest checkpoint's."""
    paths = [hand_made_checkpoint(tmp_path / f"ckpt-{i}.h5", i) for i in (1, 2, 3)]
    output = average_checkpoints(paths, str(tmp_path / "out" / "avg.h5"))
    with h5py.File(output, "r") as f:
        mean = np.array([[4.0, 5.0], [6.0, 1.0]])  # base + 2 * mean(1, 2, 3)
        np.testing.assert_array_equal(f["dense/vars/0"][()], mean.astype(np.float32))
        assert f["dense/vars/0"].dtype == np.float32
        assert f["dense/vars/1"][()] == np.float32(2.0) and f["dense/vars/1"].shape == ()
        assert f["half/vars/0"].dtype == np.float16
        np.testing.assert_array_equal(f["half/vars/0"][()], mean.astype(np.float16))
        assert f["bf16/vars/0"].attrs["dtype"] == "bfloat16"
        np.testing.assert_array_equal(f["bf16/vars/0"][()].view(ml_dtypes.bfloat16),
                                      mean.astype(ml_dtypes.bfloat16))
        np.testing.assert_array_equal(f["seed_generator/vars/0"][()], [7, 3])
        assert f["optimizer/vars/0"][()] == 30
        np.testing.assert_array_equal(f["optimizer/vars/1"][()],
                                      (np.array([[6.0, 7.0], [8.0, 3.0]]) * 100.0))
    assert os.listdir(tmp_path / "out") == ["avg.h5"]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"dense/vars/0": np.zeros((2, 3), np.float32)},
         r"dataset 'dense/vars/0' is float32\[2, 3\] in .*ckpt-1.h5 but float32\[2, 2\] in "
         r".*ckpt-2.h5"),
        ({"dense/vars/0": np.zeros((2, 2), np.float64)},
         r"dataset 'dense/vars/0' is float64\[2, 2\] in .*ckpt-1.h5 but float32\[2, 2\]"),
        ({"dense/vars/2": np.zeros(2, np.float32)},
         r"ckpt-1.h5 has a dataset 'dense/vars/2' that .*ckpt-2.h5 lacks"),
        ({"a_layer_before_dense/vars/0": np.zeros(2, np.float32),
          "dense/vars/0": np.zeros(3, np.float32)},
         r"ckpt-1.h5 has a dataset 'a_layer_before_dense/vars/0' that"),
    ],
)
def test_layouts_that_differ_are_an_error_naming_the_first_difference(tmp_path, change, message):
    """A dataset of another shape, dtype or name: the error names the first such dataset (in
    name order) and both files, and nothing is written."""
    older = {"dense/vars/0": np.ones((2, 2), np.float32), "dense/vars/1": np.ones(2, np.float32)}
    newer = dict(older)
    older.update(change)
    paths = [write_h5(tmp_path / "ckpt-1.h5", older), write_h5(tmp_path / "ckpt-2.h5", newer)]
    with pytest.raises(CheckpointLayoutError, match=message):
        average_checkpoints(paths, str(tmp_path / "out" / "avg.h5"))
    assert not os.path.exists(tmp_path / "out")


def test_missing_dataset_in_an_older_checkpoint_is_named(tmp_path):
    """A dataset only the newest checkpoint has is named too, and nothing is written."""
    older = {"dense/vars/0": np.ones(2, np.float32)}
    newer = {"dense/vars/0": np.ones(2, np.float32), "dense/vars/1": np.ones(2, np.float32)}
    paths = [write_h5(tmp_path / "ckpt-1.h5", older), write_h5(tmp_path / "ckpt-2.h5", newer)]
    with pytest.raises(CheckpointLayoutError, match=r"ckpt-1.h5 lacks the dataset 'dense/vars/1'"):
        average_checkpoints(paths, str(tmp_path / "avg.h5"))
    assert sorted(os.listdir(tmp_path)) == ["ckpt-1.h5", "ckpt-2.h5"]


def test_refuses_to_overwrite_an_input_and_to_average_nothing(tmp_path):
    paths = [hand_made_checkpoint(tmp_path / f"ckpt-{i}.h5", i) for i in (1, 2)]
    before = file_bytes(paths[1])
    with pytest.raises(ValueError, match="one of the checkpoints being averaged"):
        average_checkpoints(paths, paths[1])
    assert file_bytes(paths[1]) == before
    with pytest.raises(ValueError, match="No checkpoints"):
        average_checkpoints([], str(tmp_path / "avg.h5"))
