"""Learning-rate schedules as products of named factors (tensor2tensor's `learning_rate_schedule`).

The paper's schedule (§5.3), lrate = d_model^-0.5 · min(step^-0.5, step · warmup^-1.5), is
"constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size" with constant 1: below warmup the
product is step/warmup · warmup^-0.5 = step · warmup^-1.5, above it step^-0.5.
"""

import keras
from keras import ops

from t2t_repro.hparams import HParamsError


def _linear_warmup(step, schedule):
    return ops.minimum(1.0, step / schedule.warmup_steps)


def _rsqrt_decay(step, schedule):
    return ops.rsqrt(ops.maximum(step, float(schedule.warmup_steps)))


def _rsqrt_normalized_decay(step, schedule):
    return _rsqrt_decay(step, schedule) * (schedule.warmup_steps**0.5)


FACTORS = {
    "constant": lambda step, schedule: schedule.constant,
    "linear_warmup": _linear_warmup,
    "rsqrt_decay": _rsqrt_decay,
    "rsqrt_normalized_decay": _rsqrt_normalized_decay,
    "rsqrt_hidden_size": lambda step, schedule: schedule.hidden_size**-0.5,
}


@keras.saving.register_keras_serializable(package="t2t_repro")
class FactorSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The product of the factors named in `factors` ("a*b*c"), evaluated at a 1-based step.

    Keras passes the optimizer's 0-based iteration count; the update it is about to make is step
    iterations + 1, the step the paper's formula numbers.

    Args:
        factors: names from `FACTORS` joined by '*'.
        constant: value of the "constant" factor.
        warmup_steps: warmup length for the warmup and decay factors.
        hidden_size: d_model, for "rsqrt_hidden_size".
    """

    def __init__(self, factors, constant=1.0, warmup_steps=4000, hidden_size=512):
        self.factors = factors
        self.factor_names = [name.strip() for name in factors.split("*")]
        unknown = [name for name in self.factor_names if name not in FACTORS]
        if unknown:
            raise HParamsError(
                f"hparam learning_rate_schedule names unknown factor(s) {unknown} in '{factors}'. "
                f"Known factors: {', '.join(sorted(FACTORS))}."
            )
        self.constant = constant
        self.warmup_steps = warmup_steps
        self.hidden_size = hidden_size

    def __call__(self, iteration):
        step = ops.cast(iteration, "float32") + 1.0
        rate = ops.convert_to_tensor(1.0, "float32")
        for name in self.factor_names:
            rate = rate * FACTORS[name](step, self)
        return rate

    def get_config(self):
        return {
            "factors": self.factors,
            "constant": self.constant,
            "warmup_steps": self.warmup_steps,
            "hidden_size": self.hidden_size,
        }


def schedule_from_hparams(hparams):
    return FactorSchedule(
        hparams.learning_rate_schedule,
        constant=hparams.learning_rate_constant,
        warmup_steps=hparams.learning_rate_warmup_steps,
        hidden_size=hparams.hidden_size,
    )
