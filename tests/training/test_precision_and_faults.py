"""Mixed-precision training and non-finite updates, through TensorFlowTrainStep and
TensorFlowTrainingRun.

bfloat16 keeps float32's exponent and 8 significant bits: a tiny model's loss curve under
`mixed_bfloat16` follows float32's closely. float16 has 11 bits but a small range, so its
gradients are scaled (Keras's LossScaleOptimizer): an overflow skips the step and halves the
scale, and the scale is part of the checkpoint. A NaN or infinite loss stops training with
nothing of that step saved.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from step_cases import HPARAMS, adam_moments, micro_batch, new_model
from t2t_repro.hparams import create_hparams
from t2t_repro.training.checkpoints import CheckpointManager
from t2t_repro.training.tensorflow.train_step import TensorFlowTrainStep
from test_train_step import batches_iterator

STEPS = 30


def loss_curve(dtype_policy, batches):
    hparams = create_hparams("transformer_tiny", f"{HPARAMS},dtype_policy={dtype_policy}")
    model = new_model(hparams, dtype_policy=dtype_policy)
    step = TensorFlowTrainStep(model, tf.distribute.get_strategy(), hparams.label_smoothing)
    iterator = batches_iterator(batches)
    curve = []
    for _ in batches:
        stats = step(iterator)
        curve.append(stats.loss_sum / stats.target_tokens)
    return np.array(curve)


def test_bfloat16_loss_curve_stays_close_to_float32():
    """30 updates on the same batches from the same weights. The first loss (same weights)
    differs only by bfloat16's rounding, under 1%; then the rounding perturbs the weights
    and the two runs' per-step losses drift apart by a few percent on single batches, but they
    learn alike: mean relative difference under 2%, final losses within 1%, while the loss
    itself falls by over 20%."""
    batches = [micro_batch(seed, 6, 7, 6) for seed in range(4)] * (STEPS // 4 + 1)
    batches = batches[:STEPS]
    full = loss_curve("float32", batches)
    mixed = loss_curve("mixed_bfloat16", batches)
    relative = np.abs(mixed - full) / full
    assert full[-1] < 0.8 * full[0] and mixed[-1] < 0.8 * mixed[0]
    assert 0 < relative[0] < 0.01  # nonzero: bfloat16 arithmetic did happen
    assert relative.mean() < 0.02
    assert relative[-1] < 0.01
    assert relative.max() < 0.08


def float16_model_and_step(clip_norm=0.0):
    hparams = create_hparams("transformer_tiny", f"{HPARAMS},dtype_policy=mixed_float16")
    model = new_model(hparams, dtype_policy="mixed_float16")
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    return model, TensorFlowTrainStep(model, tf.distribute.get_strategy(), hparams.label_smoothing,
                                      clip_norm=clip_norm)


def test_a_float16_update_is_clipped_to_the_norm_of_the_unscaled_gradient():
    """Under loss scaling the step's gradients are the loss scale (2^15 at first) times the
    true ones; clipped as they are, the true gradient would be clipped to clip_norm / 2^15.
    After one update Adam's first moments are (1 - β1) times the clipped gradient, so their
    global norm is (1 - β1) · clip_norm."""
    clip_norm = 0.05
    model, step = float16_model_and_step(clip_norm)
    step(batches_iterator([micro_batch(0, 4, 6, 5)]))
    assert float(model.optimizer.dynamic_scale.numpy()) == 2.0 ** 15
    assert int(model.optimizer.iterations.numpy()) == 1
    moments = [np.asarray(m, np.float64) for m in adam_moments(model)]
    norm = np.sqrt(sum(np.square(m).sum() for m in moments))
    assert norm == pytest.approx((1 - model.optimizer.inner_optimizer.beta_1) * clip_norm,
                                 rel=1e-5)


def test_float16_overflow_skips_the_step_and_halves_the_scale():
    model, step = float16_model_and_step()
    batches = [micro_batch(seed, 4, 6, 5) for seed in range(3)]
    iterator = batches_iterator(batches)
    step(iterator)
    scale = float(model.optimizer.dynamic_scale.numpy())
    weights = model.get_weights()
    # Planted: a scale so large that the float16 gradients overflow to infinity.
    model.optimizer.dynamic_scale.assign(2.0 ** 100)
    stats = step(iterator)
    assert stats.finite  # the loss was finite; only the scaled gradients overflowed
    assert int(model.optimizer.iterations.numpy()) == 1  # the step did not count
    assert float(model.optimizer.dynamic_scale.numpy()) == 2.0 ** 99
    for before, after in zip(weights, model.get_weights()):
        np.testing.assert_array_equal(before, after)
    model.optimizer.dynamic_scale.assign(scale)
    step(iterator)
    assert int(model.optimizer.iterations.numpy()) == 2


def test_a_resumed_float16_run_keeps_its_loss_scale(tmp_path):
    model, step = float16_model_and_step()
    iterator = batches_iterator([micro_batch(seed, 4, 6, 5) for seed in range(2)])
    step(iterator)
    model.optimizer.dynamic_scale.assign(512.0)  # not the initial scale
    step(iterator)
    CheckpointManager(str(tmp_path), model).save()
    resumed, _ = float16_model_and_step()
    assert float(resumed.optimizer.dynamic_scale.numpy()) != 512.0
    assert CheckpointManager(str(tmp_path), resumed).restore() == 2
    assert float(resumed.optimizer.dynamic_scale.numpy()) == 512.0


@pytest.mark.parametrize("dtype_policy", ["float32", "mixed_float16"])
def test_a_nan_loss_is_reported_as_not_finite(dtype_policy):
    hparams = create_hparams("transformer_tiny", f"{HPARAMS},dtype_policy={dtype_policy}")
    model = new_model(hparams, dtype_policy=dtype_policy)
    step = TensorFlowTrainStep(model, tf.distribute.get_strategy(), hparams.label_smoothing)
    iterator = batches_iterator([micro_batch(seed, 4, 6, 5) for seed in range(2)])
    assert step(iterator).finite
    kernel = model.trainable_variables[1]
    kernel.assign(tf.fill(kernel.shape, np.nan))
    assert not step(iterator).finite
