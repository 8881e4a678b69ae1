"""Keras's Adam with each variable's update done by TensorFlow's fused kernel.

Keras's Adam writes the update as about a dozen element-wise ops per variable, each a pass
over the variable with a temporary of its size; `ResourceApplyAdam` computes it in one pass
and one graph node, so a trainer starts sooner (less to trace and optimise) and an update
takes less time and memory (docs/performance.md, "Start-up"). The formula is Keras's:

    m ← m + (1 - β1)(g - m),  v ← v + (1 - β2)(g² - v),
    θ ← θ - lr·√(1 - β2ᵗ)/(1 - β1ᵗ) · m / (√v + ε);

the kernel takes 1 - β in float32 where Keras takes it in float64, so the moments differ from
Keras's by up to about 1e-6 relative. The variables, their names and so the checkpoints are
Keras's Adam's, which the JAX backend keeps using.
"""

import keras
import tensorflow as tf


class FusedAdam(keras.optimizers.Adam):
    """`keras.optimizers.Adam` (without AMSGrad) for the TensorFlow backend."""

    def __init__(self, *args, amsgrad=False, **kwargs):
        if amsgrad:
            raise ValueError("FusedAdam has no AMSGrad: use keras.optimizers.Adam for it.")
        super().__init__(*args, **kwargs)
        self._update_scalars = None

    def apply(self, *args, **kwargs):
        # The scalars belong to this update (in a trace, to its graph): not kept past it.
        try:
            return super().apply(*args, **kwargs)
        finally:
            self._update_scalars = None

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        index = self._get_variable_index(variable)
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle,
            m=self._momentums[index].value.handle,
            v=self._velocities[index].value.handle,
            grad=tf.cast(tf.convert_to_tensor(gradient), dtype),
            **self._scalars(dtype, learning_rate),
        )

    def _scalars(self, dtype, learning_rate):
        """The kernel's scalar arguments in `dtype`, made once per `apply` (every variable's
        update shares the learning rate tensor it is given) rather than once per variable:
        in a traced step that is a tenth fewer nodes to trace and optimise."""
        made = self._update_scalars
        if made is None or made[0] is not learning_rate or made[1] != dtype:
            step = tf.cast(self.iterations + 1, dtype)
            beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
            self._update_scalars = learning_rate, dtype, {
                "beta1_power": tf.pow(beta_1, step), "beta2_power": tf.pow(beta_2, step),
                "lr": tf.cast(learning_rate, dtype), "beta1": beta_1, "beta2": beta_2,
                "epsilon": tf.cast(self.epsilon, dtype)}
        return self._update_scalars[2]
