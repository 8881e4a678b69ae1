"""The learning-rate schedule and the optimizer against the paper's §5.3 by hand."""

import math

import keras
import numpy as np
import pytest

from t2t_repro.hparams import create_hparams
from t2t_repro.training.learning_rate import FactorSchedule, schedule_from_hparams
from t2t_repro.training.optimizer import create_optimizer

PAPER_SCHEDULE = "constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size"
D_MODEL = 512
WARMUP = 4000


def paper_lrate(step, d_model=D_MODEL, warmup=WARMUP):
    """lrate = d_model^-0.5 · min(step^-0.5, step · warmup^-1.5), plain Python floats."""
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def schedule_value(schedule, iteration):
    return float(keras.ops.convert_to_numpy(schedule(iteration)))


@pytest.mark.parametrize(
    "step, expected",
    [
        (1, 1.746928e-7),  # 512^-0.5 · 4000^-1.5: warmup's first step
        (4000, 6.98771e-4),  # the peak, where both branches equal (512 · 4000)^-0.5
        (16000, 3.493856e-4),  # 4 · 4000: half the peak, on the step^-0.5 branch
    ],
)
def test_paper_schedule_at_hand_computed_points(step, expected):
    """The library's base schedule at steps whose rates are worked out by hand from
    d_model^-0.5 · min(step^-0.5, step · warmup^-1.5), d_model 512, warmup 4000."""
    assert expected == pytest.approx(paper_lrate(step), rel=1e-5)
    schedule = schedule_from_hparams(create_hparams("transformer_base"))
    assert schedule_value(schedule, step - 1) == pytest.approx(expected, rel=1e-5)
    bare = FactorSchedule(PAPER_SCHEDULE, constant=1.0, warmup_steps=WARMUP,
                          hidden_size=D_MODEL)
    assert schedule_value(bare, step - 1) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("step", [1, 2, 1000, 3999, 4000, 4001, 16000, 100000])
def test_paper_schedule_matches_formula(step):
    """FactorSchedule evaluated at Keras's 0-based iteration `step - 1` gives the paper's
    lrate for update number `step` (paper §5.3, d_model 512, warmup 4000)."""
    schedule = FactorSchedule(PAPER_SCHEDULE, constant=1.0, warmup_steps=WARMUP,
                              hidden_size=D_MODEL)
    assert schedule_value(schedule, step - 1) == pytest.approx(paper_lrate(step), rel=1e-5)


@pytest.mark.parametrize("step", [1, 4000, 16000])
def test_base_hparams_optimizer_learning_rate(step):
    """The optimizer built from transformer_base reports the paper's rate for its next update:
    with `iterations` = step - 1 updates done, the next one is update number `step`."""
    optimizer = create_optimizer(create_hparams("transformer_base"))
    optimizer.iterations.assign(step - 1)
    rate = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
    assert rate == pytest.approx(paper_lrate(step), rel=1e-5)
    schedule = schedule_from_hparams(create_hparams("transformer_base"))
    assert schedule_value(schedule, step - 1) == pytest.approx(paper_lrate(step), rel=1e-5)


def _adam_update(iterations_done, gradient=1.0):
    """Applies one gradient to a zero variable with the transformer_base optimizer after
    `iterations_done` updates; returns the variable's change and the new iteration count."""
    optimizer = create_optimizer(create_hparams("transformer_base"))
    variable = keras.Variable(np.zeros((1,), "float32"))
    optimizer.build([variable])
    optimizer.iterations.assign(iterations_done)
    optimizer.apply_gradients([(np.full((1,), gradient, "float32"), variable)])
    change = float(keras.ops.convert_to_numpy(variable)[0])
    return change, int(keras.ops.convert_to_numpy(optimizer.iterations))


def test_first_adam_update_uses_rate_of_step_one():
    """Adam's very first update moves a parameter by lrate(1) · g/(|g| + ε) ≈ lrate(1): the
    first update is step 1 of the paper's formula, not step 0 (which would give rate 0)."""
    change, iterations = _adam_update(iterations_done=0, gradient=1.0)
    assert -change == pytest.approx(paper_lrate(1) / (1.0 + 1e-9), rel=1e-5)
    assert iterations == 1


def test_adam_update_at_step_4000_by_hand():
    """With 3999 updates counted (fresh moments), update 4000 is by hand
    lrate(4000) · m̂ / (√v̂ + ε), m̂ = 0.1g/(1-0.9^4000), v̂ = 0.02g²/(1-0.98^4000)."""
    g = 1.0
    step = 4000
    m_hat = (1 - 0.9) * g / (1 - 0.9**step)
    v_hat = (1 - 0.98) * g * g / (1 - 0.98**step)
    expected = paper_lrate(step) * m_hat / (math.sqrt(v_hat) + 1e-9)
    change, iterations = _adam_update(iterations_done=step - 1, gradient=g)
    assert iterations == step
    assert -change == pytest.approx(expected, rel=1e-4)


def test_optimizer_is_papers_adam():
    """Adam with β1 = 0.9, β2 = 0.98, ε = 1e-9 (paper §5.3), no gradient clipping."""
    optimizer = create_optimizer(create_hparams("transformer_base"))
    assert isinstance(optimizer, keras.optimizers.Adam)
    assert optimizer.beta_1 == pytest.approx(0.9)
    assert optimizer.beta_2 == pytest.approx(0.98)
    assert optimizer.epsilon == pytest.approx(1e-9)
    assert optimizer.global_clipnorm is None


def test_unknown_factor_names_known_factors():
    """A typo in the schedule string is an error that names it and lists the known factors."""
    with pytest.raises(ValueError) as error:
        FactorSchedule("constant*linear_warmpu*rsqrt_decay")
    message = str(error.value)
    assert "linear_warmpu" in message
    for known in ("constant", "linear_warmup", "rsqrt_decay", "rsqrt_normalized_decay",
                  "rsqrt_hidden_size"):
        assert known in message


@pytest.mark.parametrize("step", [1, 50, 100, 101, 400, 2500])
def test_normalized_decay_schedule(step):
    """t2t's "constant*linear_warmup*rsqrt_normalized_decay":
    c · min(1, step/warmup) · √warmup / √max(step, warmup) — peaks at c at the end of warmup."""
    constant, warmup = 2.0, 100
    expected = constant * min(1.0, step / warmup) * math.sqrt(warmup) / math.sqrt(
        max(step, warmup)
    )
    schedule = FactorSchedule("constant*linear_warmup*rsqrt_normalized_decay",
                              constant=constant, warmup_steps=warmup)
    assert schedule_value(schedule, step - 1) == pytest.approx(expected, rel=1e-5)


def test_tiny_hparams_schedule():
    """transformer_tiny (constant 2, d_model 64, warmup 400) is the paper's formula times 2."""
    hparams = create_hparams("transformer_tiny")
    schedule = schedule_from_hparams(hparams)
    for step in (1, 200, 400, 1600):
        expected = 2.0 * paper_lrate(step, d_model=64, warmup=400)
        assert schedule_value(schedule, step - 1) == pytest.approx(expected, rel=1e-5)


def test_schedule_config_round_trip():
    """The schedule serializes with the optimizer (needed to reload a compiled model)."""
    schedule = FactorSchedule(PAPER_SCHEDULE, constant=1.5, warmup_steps=300, hidden_size=128)
    restored = keras.optimizers.schedules.deserialize(
        keras.optimizers.schedules.serialize(schedule)
    )
    assert isinstance(restored, FactorSchedule)
    assert restored.get_config() == schedule.get_config()
    assert schedule_value(restored, 999) == pytest.approx(schedule_value(schedule, 999))
