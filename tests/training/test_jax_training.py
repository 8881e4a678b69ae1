"""Training under JAX against training under TensorFlow, and the JAX trainer without TensorFlow.

The JAX side runs in subprocesses with KERAS_BACKEND=jax, TensorFlow installed, which fail if
any TensorFlow module is in `sys.modules` at their end: an import that a library catches and
works around (tensorboard's does) still counts.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from step_cases import HPARAMS, adam_moments, micro_batch, new_model, token_counts, union
from t2t_repro.data.pair_packing import pack_pairs
from t2t_repro import hparams as hparams_lib
from t2t_repro.hparams import create_hparams
from t2t_repro.training import checkpoints
from t2t_repro.training.tensorflow.train_step import TensorFlowTrainStep
from conftest import HANG_GUARD_S

TOLERANCE = 1e-5  # float32 matmuls in another order, on another backend
CLIP_NORM = 0.05  # well below the tiny model's first gradient norm, so clipping acts
PACKED_ROW_LENGTH = 16  # the union batch's 8 pairs (sources <= 7, targets <= 9) in fewer rows
HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))


def bfloat16_values(shape, seed):
    """Random normals rounded to bfloat16, as float32: exact in either dtype."""
    values = np.random.default_rng(seed).standard_normal(shape).astype("float32")
    return (values.view(np.uint32) & 0xFFFF0000).view(np.float32)


# 2,000 lookups of 7 rows: each row's gradient sums ~290 of them.
EMBEDDING_CASE = {"embedding_shape": np.array([7, 16]),
                  "embedding_ids": np.random.default_rng(1).integers(0, 7, (4, 500)),
                  "embedding_weights": bfloat16_values((4, 500, 16), seed=2)}


def jax_environment():
    return dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=os.pathsep.join([HERE, REPO_ROOT]),
                TF_CPP_MIN_LOG_LEVEL="2")


def tensorflow_update(model, batch, clip_norm=0.0):
    """One TensorFlowTrainStep update of `model` on `batch`; returns the update's token-mean
    loss."""
    hparams = model.hparams
    step = TensorFlowTrainStep(model, tf.distribute.get_strategy(), hparams.label_smoothing,
                     clip_norm=clip_norm)
    stats = step(iter([tuple(tf.nest.map_structure(tf.constant, batch))]))
    return stats.loss_sum / stats.target_tokens


def largest_difference(arrays, others):
    assert len(arrays) == len(others) > 0
    return max(float(np.abs(np.asarray(a) - np.asarray(b)).max())
               for a, b in zip(arrays, others))


@pytest.fixture(scope="module")
def jax_results(tmp_path_factory):
    """The worker's results from the TensorFlow model's initial checkpoint, and that model's
    batches and hparams."""
    directory = tmp_path_factory.mktemp("jax_equivalence")
    hparams = create_hparams("transformer_tiny", HPARAMS)
    parts = [micro_batch(3, 3, 7, 5), micro_batch(4, 5, 4, 9)]  # 8 rows: splits over 2 devices
    assert len(set(token_counts(parts))) == 2
    whole = union(parts)
    model = new_model(hparams)
    checkpoint = str(directory / "initial.weights.h5")
    model.save_weights(checkpoint)
    packed = packed_union(whole)
    arrays = {f"{name}_{key}": value for name, (features, _) in
              (("a", parts[0]), ("b", parts[1]), ("union", whole), ("packed", packed))
              for key, value in features.items()}
    np.savez(directory / "cases.npz", checkpoint=checkpoint, hparams=HPARAMS,
             clip_norm=CLIP_NORM, **arrays, **EMBEDDING_CASE)
    result = subprocess.run(
        [sys.executable, os.path.join(HERE, "jax_worker.py"), str(directory / "cases.npz"),
         str(directory)], capture_output=True, text=True, env=jax_environment(),
        timeout=HANG_GUARD_S)
    assert result.returncode == 0, result.stderr[-3000:]
    results = np.load(directory / "results.npz")
    return {"results": results, "directory": directory, "hparams": hparams, "whole": whole,
            "parts": parts, "packed": packed, "checkpoint": checkpoint}


def packed_union(batch):
    """`batch`'s pairs (padding stripped) packed into rows of PACKED_ROW_LENGTH."""
    features, _ = batch
    pairs = [(source[source != 0], target[target != 0])
             for source, target in zip(features["inputs"], features["targets"])]
    packed = pack_pairs(pairs, PACKED_ROW_LENGTH)
    assert len(packed["targets"]) < len(pairs)  # some rows hold several pairs
    return packed, packed["targets"]


def weights_of(results, name):
    count = len([key for key in results.files if key.startswith(f"{name}_weight_")])
    return [results[f"{name}_weight_{i}"] for i in range(count)]


def test_jax_reads_a_tensorflow_checkpoint_with_identical_logits(jax_results):
    model = new_model(jax_results["hparams"])
    model.load_weights(jax_results["checkpoint"])
    logits = model(jax_results["whole"][0], training=False).numpy()
    assert np.abs(logits - jax_results["results"]["logits"]).max() < TOLERANCE


def test_the_jax_train_step_compiles_without_ynnpack_fusions(jax_results):
    """They keep extra vocabulary-wide copies of the logits' gradient alive on CPUs
    (`training/jax/compiler_options.py`); the plain jit of the same update shows the option
    is what removes them."""
    in_train_step, under_plain_jit = jax_results["results"]["ynnpack_fusions"]
    assert in_train_step == 0
    assert under_plain_jit > 0


@pytest.mark.parametrize("jax_case", ["one_step", "two_devices"])
def test_one_adam_step_under_jax_equals_one_under_tensorflow(jax_results, jax_case):
    """The same batch from the same weights: loss and weights after one update agree, on one
    device and on two (`DataParallel`, rows split)."""
    model = new_model(jax_results["hparams"])
    model.load_weights(jax_results["checkpoint"])
    loss = tensorflow_update(model, jax_results["whole"])
    results = jax_results["results"]
    assert float(results[f"{jax_case}_loss"]) == pytest.approx(loss, rel=TOLERANCE)
    weights = weights_of(results, jax_case)
    assert largest_difference(model.get_weights(), weights) < TOLERANCE
    initial = new_model(jax_results["hparams"])
    initial.load_weights(jax_results["checkpoint"])
    assert largest_difference(initial.get_weights(), weights) > 100 * TOLERANCE  # it moved


def test_a_packed_batch_takes_the_unpacked_batchs_step_under_both_backends(jax_results):
    """The union batch's pairs packed into fewer rows: one update under TensorFlow and one
    under JAX give the weights of TensorFlow's update on the ordinary padded batch."""
    unpacked = new_model(jax_results["hparams"])
    unpacked.load_weights(jax_results["checkpoint"])
    loss = tensorflow_update(unpacked, jax_results["whole"])
    packed = new_model(jax_results["hparams"])
    packed.load_weights(jax_results["checkpoint"])
    assert tensorflow_update(packed, jax_results["packed"]) == pytest.approx(loss, abs=1e-6)
    assert largest_difference(packed.get_weights(), unpacked.get_weights()) < TOLERANCE
    results = jax_results["results"]
    assert float(results["packed_loss"]) == pytest.approx(loss, rel=TOLERANCE)
    assert largest_difference(weights_of(results, "packed"), unpacked.get_weights()) < TOLERANCE


def test_two_clipped_micro_batches_under_jax_equal_one_clipped_tensorflow_step(jax_results):
    model = new_model(jax_results["hparams"])
    model.load_weights(jax_results["checkpoint"])
    loss = tensorflow_update(model, jax_results["whole"], clip_norm=CLIP_NORM)
    results = jax_results["results"]
    assert float(results["accumulated_loss"]) == pytest.approx(loss, rel=TOLERANCE)
    assert largest_difference(model.get_weights(), weights_of(results, "accumulated")) < TOLERANCE
    unclipped = weights_of(results, "one_step")
    assert largest_difference(model.get_weights(), unclipped) > 100 * TOLERANCE


# The checkpoint holds plain Adam's state (zeros, before any update), which the float16
# model's LossScaleOptimizer, another structure, does not load; its own state starts at zero.
@pytest.mark.filterwarnings("ignore:Skipping variable loading for optimizer")
def test_a_float16_update_under_jax_is_tensorflows_and_an_overflowing_one_is_skipped(
        jax_results):
    """mixed_float16 (dynamic loss scaling), two micro-batches clipped to CLIP_NORM, from the
    same weights: JAX's loss and Adam first moments are TensorFlow's within float16's
    rounding (float32's differ from either by over 20 float16 units), their global norm is
    (1 - β1)·CLIP_NORM (the true gradient clipped, not the scaled one), and with the scale
    planted at 2^100 the scaled gradients overflow: no step counted, weights and moments
    untouched, the scale halved."""
    results = jax_results["results"]
    hparams = create_hparams("transformer_tiny", f"{HPARAMS},dtype_policy=mixed_float16")
    model = new_model(hparams, dtype_policy="mixed_float16")
    model.load_weights(jax_results["checkpoint"])
    step = TensorFlowTrainStep(model, tf.distribute.get_strategy(), hparams.label_smoothing,
                               accumulation_steps=2, clip_norm=CLIP_NORM)
    stats = step(iter([tuple(tf.nest.map_structure(tf.constant, part))
                       for part in jax_results["parts"]]))
    assert float(results["float16_loss"]) == pytest.approx(
        stats.loss_sum / stats.target_tokens, rel=1e-6)
    moments = adam_moments(model)
    jax_moments = [results[f"float16_moment_{i}"] for i in range(len(moments))]
    float16_unit = 2.0 ** -11
    largest = max(float(np.abs(m).max()) for m in moments)
    assert largest_difference(moments, jax_moments) < float16_unit * largest
    assert largest_difference(model.get_weights(), weights_of(results, "float16")) < 1e-4
    norm = np.sqrt(sum(np.square(m.astype(np.float64)).sum() for m in jax_moments))
    assert norm == pytest.approx((1 - model.optimizer.inner_optimizer.beta_1) * CLIP_NORM,
                                 rel=1e-5)
    assert (bool(results["float16_finite"]), int(results["float16_iterations"]),
            float(results["float16_scale"])) == (True, 1, 2.0 ** 15)

    assert (bool(results["float16_overflow_finite"]), int(results["float16_overflow_iterations"]),
            float(results["float16_overflow_scale"])) == (True, 0, 2.0 ** 99)
    initial = new_model(jax_results["hparams"])
    initial.load_weights(jax_results["checkpoint"])
    assert largest_difference(initial.get_weights(),
                              weights_of(results, "float16_overflow")) == 0
    assert all(not results[f"float16_overflow_moment_{i}"].any() for i in range(len(moments)))


@pytest.mark.parametrize("case", ["in_order", "reassigned", "new_iterator", "failing",
                                  "accumulated"])
def test_an_update_started_ahead_equals_the_plain_update_it_stands_for(jax_results, case):
    """On accelerators each call starts the next update before waiting for its own: the
    weights are those of plain updates in the same order, also when the iterator ends, when
    the weights are loaded anew between calls (the update is run again from them), when the
    next call brings another iterator (whose batch is taken, not the one pulled ahead) and when
    the iterator fails while the next update's batch is pulled (the call returns its own
    update; the next raises the iterator's error), and with two micro-batches an update."""
    results = jax_results["results"]
    if case == "failing":
        assert str(results["ahead_failing_error"]) == "the data broke"
    ahead, plain = weights_of(results, f"ahead_{case}"), weights_of(results, f"plain_{case}")
    assert largest_difference(ahead, plain) == 0
    initial = new_model(jax_results["hparams"])
    initial.load_weights(jax_results["checkpoint"])
    assert largest_difference(initial.get_weights(), plain) > 100 * TOLERANCE  # it moved


def test_a_mixed_precision_embedding_gradient_sums_in_float32_under_jax(jax_results):
    """Under mixed_bfloat16 the lookup gathers rows of the float32 matrix and casts them, so its
    gradient, a scatter-add of every position's gradient into its row, is a float32 one:
    gathering from the bfloat16-cast matrix made it a bfloat16 scatter-add, which on a GPU
    rounds every addition and was 25x slower (docs/jax_and_gpus.md). XLA on a CPU computes
    either in float32, so the program's scatter type is checked, and the values against
    NumPy's float64 sums (each row sums ~290 terms)."""
    results = jax_results["results"]
    assert list(results["embedding_scatter_types"]) == ["f32"]
    ids, weights = EMBEDDING_CASE["embedding_ids"], EMBEDDING_CASE["embedding_weights"]
    vocab_size, hidden_size = EMBEDDING_CASE["embedding_shape"]
    expected = np.zeros((vocab_size, hidden_size))
    np.add.at(expected, ids.ravel(), weights.reshape(-1, hidden_size) * np.sqrt(hidden_size))
    gradient = results["embedding_gradient"]
    assert gradient.dtype == np.float32
    assert np.abs(gradient - expected).max() < 1e-6 * np.abs(expected).max()


def test_tensorflow_reads_a_jax_checkpoint_with_identical_logits(jax_results):
    """The checkpoint JAX wrote after its update: TensorFlow reads it (optimizer step
    included) and computes the logits of TensorFlow's own update."""
    stepped = new_model(jax_results["hparams"])
    stepped.load_weights(jax_results["checkpoint"])
    tensorflow_update(stepped, jax_results["whole"])
    from_jax = new_model(jax_results["hparams"])
    from_jax.load_weights(str(jax_results["directory"] / "jax-step.weights.h5"))
    assert int(from_jax.optimizer.iterations.numpy()) == 1
    features = jax_results["whole"][0]
    difference = np.abs(from_jax(features, training=False).numpy()
                        - stepped(features, training=False).numpy()).max()
    assert difference < TOLERANCE


TRAINER_WITHOUT_TENSORFLOW = """
import os, runpy, sys
from tensorflow_modules import exit_if_tensorflow_was_imported
sys.argv = ["t2t_repro.trainer"] + sys.argv[1:]
try:
    runpy.run_module("t2t_repro.trainer", run_name="__main__")
finally:
    exit_if_tensorflow_was_imported()
"""


# The trainer's mechanics under JAX: one layer, and sequences of at most 7 symbols and EOS, so
# that every batch has the one bucket shape (`data.array_batches`) and each step compiles once.
MECHANICS_HPARAMS = "--hparams=num_hidden_layers=1,max_length=8"


def jax_trainer(*flags, compilation_cache=None):
    """Runs the trainer under JAX without TensorFlow; a resumed run given the first run's
    `compilation_cache` folder loads its compiled steps instead of compiling them again."""
    environment = jax_environment()
    if compilation_cache:
        environment.update(JAX_COMPILATION_CACHE_DIR=str(compilation_cache),
                           JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    return subprocess.run([sys.executable, "-c", TRAINER_WITHOUT_TENSORFLOW, *flags],
                          capture_output=True, text=True, env=environment,
                          timeout=HANG_GUARD_S)


@pytest.fixture(scope="module")
def compilation_cache(tmp_path_factory):
    """One JAX compilation cache for the module's trainer runs: transformer_tiny on the
    algorithmic problems compiles the same step shapes in each."""
    return tmp_path_factory.mktemp("jax_compilation_cache")


def test_the_trainer_trains_and_resumes_under_jax_without_tensorflow(tmp_path,
                                                                     compilation_cache):
    from conftest import attention_image_steps, read_scalars

    output_dir = tmp_path / "run"
    common = ["--problem=algorithmic_reverse", "--hparams_set=transformer_tiny",
              MECHANICS_HPARAMS,
              f"--output_dir={output_dir}", "--eval_every=10", "--log_every=10",
              "--random_seed=1", "--eval_decode_examples=0"]
    first = jax_trainer(*common, "--train_steps=20", compilation_cache=compilation_cache)
    assert first.returncode == 0, first.stderr[-3000:]
    assert [step for step, _ in checkpoints.list_checkpoints(output_dir)] == [20]
    resumed = jax_trainer(*common, "--train_steps=30", "--eval_decode_examples=8",
                          compilation_cache=compilation_cache)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "at step 20" in resumed.stdout
    assert [step for step, _ in checkpoints.list_checkpoints(output_dir)] == [20, 30]
    train, evaluation = read_scalars(output_dir / "train"), read_scalars(output_dir / "eval")
    assert sorted(train["loss"]) == [10, 20, 30]
    assert sorted(evaluation["accuracy"]) == [10, 20, 30]
    assert list(evaluation["exact_match"]) == [30]  # the decode evaluation ran at step 30
    assert evaluation["loss"][30] < evaluation["loss"][10]
    assert attention_image_steps(output_dir) == [10, 20, 30]



def test_the_jax_trainer_refuses_multi_worker_clearly(tmp_path):
    result = jax_trainer("--problem=algorithmic_reverse", "--hparams_set=transformer_tiny",
                         "--train_steps=1", "--eval_decode_examples=0",
                         f"--output_dir={tmp_path / 'a'}", "--strategy=multi_worker")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("error: ")
    assert "multi_worker is not supported under JAX" in last_line
    assert not (tmp_path / "a").exists()


def test_the_jax_trainer_trains_in_float16_and_tensorflow_resumes_its_loss_scale(tmp_path):
    """A mixed_float16 run under JAX evaluates to a finite loss, its checkpoint holds the loss
    scale (2^15, not yet grown) beside the step count, and a TensorFlow float16 model restores
    both."""
    from conftest import read_scalars
    from t2t_repro import registry
    from t2t_repro.training.checkpoints import CheckpointManager
    from t2t_repro.training.run import build_model, compile_for_training

    output_dir = tmp_path / "run"
    overrides = f"{MECHANICS_HPARAMS.removeprefix('--hparams=')},dtype_policy=mixed_float16"
    result = jax_trainer("--problem=algorithmic_reverse", "--hparams_set=transformer_tiny",
                         f"--hparams={overrides}", "--train_steps=2", "--eval_every=2",
                         "--eval_decode_examples=0", f"--output_dir={output_dir}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert [step for step, _ in checkpoints.list_checkpoints(output_dir)] == [2]
    evaluation_loss = read_scalars(output_dir / "eval")["loss"]
    assert list(evaluation_loss) == [2] and np.isfinite(evaluation_loss[2])
    hparams = create_hparams("transformer_tiny", overrides)
    model = compile_for_training(build_model(
        "transformer", hparams, registry.problems["algorithmic_reverse"](), "mixed_float16"),
        hparams)
    assert CheckpointManager(str(output_dir), model).restore() == 2
    assert float(model.optimizer.dynamic_scale.numpy()) == 2.0 ** 15


def test_early_stopping_under_jax_keeps_the_best_checkpoint_as_under_tensorflow(
        tmp_path, compilation_cache):
    """The base class's best checkpoint and early stopping, on JAX: token accuracy never
    gains 1, so step 5 stays the best and the run stops at step 15, pruning leaving best/."""
    import json

    from conftest import read_scalars

    output_dir = tmp_path / "run"
    result = jax_trainer(
        "--problem=algorithmic_copy", "--hparams_set=transformer_tiny",
        MECHANICS_HPARAMS, f"--output_dir={output_dir}", "--eval_every=5",
        "--log_every=5", "--eval_steps=2", "--random_seed=1", "--eval_decode_examples=0",
        "--train_steps=100",
        "--save_checkpoints_steps=5", "--keep_checkpoint_max=1",
        "--eval_early_stopping_metric=accuracy", "--eval_early_stopping_metric_delta=1",
        "--eval_early_stopping_steps=10", compilation_cache=compilation_cache)
    assert result.returncode == 0, result.stderr[-3000:]
    best = output_dir / "best" / "ckpt-5.weights.h5"
    assert "Early stopping at step 15" in result.stdout
    assert f"the best checkpoint is {best} (step 5" in result.stdout
    assert [step for step, _ in checkpoints.list_checkpoints(output_dir)] == [15]
    assert [step for step, _ in checkpoints.list_checkpoints(output_dir / "best")] == [5]
    for _, path in (checkpoints.list_checkpoints(output_dir)
                    + checkpoints.list_checkpoints(output_dir / "best")):
        assert checkpoints.stored_hparams(path) == hparams_lib.load(str(output_dir))
    logged = read_scalars(output_dir / "eval")["accuracy"]
    record = json.loads((output_dir / "best" / "best.json").read_text())
    assert sorted(logged) == [5, 10, 15]
    assert record["step"] == 5 and record["value"] == pytest.approx(logged[5])
