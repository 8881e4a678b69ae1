"""FusedAdam (TensorFlow's fused kernel) takes Adam's update: checked against Adam written in
NumPy over several steps, and against Keras's Adam on the same gradients under the paper's
schedule. Two replicas keeping equal copies is checked in test_train_step.py."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from t2t_repro.hparams import create_hparams
from t2t_repro.training.optimizer import create_optimizer
from t2t_repro.training.tensorflow.fused_adam import FusedAdam

SHAPES = [(3, 4), (5,)]


def numpy_adam(start, gradients, learning_rate, beta_1, beta_2, epsilon):
    """Adam in float64 as Keras and TensorFlow write it (ε added to √v, the bias corrections
    folded into the step size): the weights and both moments after every gradient."""
    theta = start.astype(np.float64)
    m = np.zeros_like(theta)
    v = np.zeros_like(theta)
    for t, g in enumerate(gradients, start=1):
        m = beta_1 * m + (1 - beta_1) * g
        v = beta_2 * v + (1 - beta_2) * g * g
        theta = theta - (learning_rate * np.sqrt(1 - beta_2**t) / (1 - beta_1**t)
                         * m / (np.sqrt(v) + epsilon))
    return theta, m, v


def random_problem(seed, steps):
    rng = np.random.default_rng(seed)
    starts = [rng.normal(size=shape).astype("float32") for shape in SHAPES]
    gradients = [[rng.normal(size=shape).astype("float32") for shape in SHAPES]
                 for _ in range(steps)]
    return starts, gradients


def train(optimizer, starts, gradients, updates_done=0, traced=True):
    """Applies each step's gradients in a traced function, as the train step does (or
    eagerly), after `updates_done` updates counted; returns the variables and the optimizer."""
    variables = [keras.Variable(start) for start in starts]
    optimizer.build(variables)
    optimizer.iterations.assign(updates_done)

    def apply(grads):
        optimizer.apply(grads, variables)

    if traced:
        apply = tf.function(apply, autograph=False)
    for step_gradients in gradients:
        apply([tf.constant(g) for g in step_gradients])
    return [keras.ops.convert_to_numpy(v) for v in variables], optimizer


def moments(optimizer, variable_count):
    """Adam's first and second moments, in the variables' order."""
    first, second = ([keras.ops.convert_to_numpy(v) for v in optimizer.variables if name in v.path]
                     for name in ("momentum", "velocity"))
    assert len(first) == len(second) == variable_count
    return first, second


def assert_close_at_scale(actual, expected, fraction):
    np.testing.assert_allclose(actual, expected, rtol=0, atol=fraction * np.abs(expected).max())


@pytest.mark.parametrize("traced", [True, False], ids=["traced", "eager"])
def test_six_updates_equal_adam_written_in_numpy(traced):
    """Traced, and eagerly, where each update must compute its own step's bias corrections."""
    starts, gradients = random_problem(seed=0, steps=6)
    hyper = dict(learning_rate=0.01, beta_1=0.9, beta_2=0.98, epsilon=1e-6)
    weights, optimizer = train(FusedAdam(**hyper), starts, gradients, traced=traced)
    first, second = moments(optimizer, len(starts))
    assert int(keras.ops.convert_to_numpy(optimizer.iterations)) == 6
    for index, start in enumerate(starts):
        theta, m, v = numpy_adam(start, [g[index] for g in gradients], **hyper)
        assert np.abs(weights[index] - start).max() > 0.01  # the updates moved it
        np.testing.assert_allclose(weights[index], theta, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(first[index], m, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(second[index], v, rtol=1e-5, atol=1e-7)


def test_the_trainers_optimizer_updates_as_keras_adam_under_the_papers_schedule():
    """transformer_base's optimizer (the schedule, β1 0.9, β2 0.98, ε 1e-9) from update 3,998
    on, beside keras.optimizers.Adam given the same hyperparameters: each array within a
    fraction of its largest value, 5e-7 for the weights (float32 rounding, four units in the
    last place) and 2e-6 for the moments, as the kernel takes 1 - β2 in float32
    (0.02 × (1 - 9.5e-7)) where Keras takes it in float64."""
    hparams = create_hparams("transformer_base")
    fused = create_optimizer(hparams)
    assert isinstance(fused, FusedAdam)
    keras_adam = keras.optimizers.Adam.from_config(fused.get_config())
    assert type(keras_adam) is keras.optimizers.Adam
    starts, gradients = random_problem(seed=1, steps=4)
    ours, fused = train(fused, starts, gradients, updates_done=3997)
    theirs, keras_adam = train(keras_adam, starts, gradients, updates_done=3997)
    for start, a, b in zip(starts, ours, theirs):
        assert np.abs(a - start).min() > 1e-5  # every weight moved
        assert_close_at_scale(a, b, 5e-7)
    for our_slots, their_slots in zip(moments(fused, len(starts)),
                                      moments(keras_adam, len(starts))):
        for a, b in zip(our_slots, their_slots):
            assert_close_at_scale(a, b, 2e-6)


def test_a_traced_update_computes_the_bias_corrections_once_for_all_variables():
    """β1ᵗ and β2ᵗ: two powers in the traced update of twelve variables, not two each."""
    variables = [keras.Variable(np.ones(3, "float32")) for _ in range(12)]
    optimizer = FusedAdam(learning_rate=0.01)
    optimizer.build(variables)
    apply = tf.function(lambda grads: optimizer.apply(grads, variables), autograph=False)
    graph = apply.get_concrete_function([tf.TensorSpec([3], tf.float32)] * 12).graph
    operations = [op.type for op in graph.get_operations()]
    assert operations.count("ResourceApplyAdam") == 12
    assert operations.count("Pow") == 2


def test_amsgrad_is_refused_naming_the_optimizer_that_has_it():
    with pytest.raises(ValueError, match="keras.optimizers.Adam"):
        FusedAdam(amsgrad=True)
