"""The paper's optimizer: Adam with β1 0.9, β2 0.98, ε 1e-9 on the factor schedule (§5.3).

Gradient clipping (`clip_grad_norm`) is done by the training step, on the global batch's
gradient, not by the optimizer (which would clip each replica's part separately). Under the
`mixed_float16` dtype policy Adam is wrapped in Keras's LossScaleOptimizer (dynamic loss
scaling); its scale is an optimizer variable, so checkpoints save and restore it. Under the
TensorFlow backend each variable's update is TensorFlow's fused Adam kernel (`FusedAdam`): the
same update, variables and checkpoints as Keras's Adam, in one op per variable.
"""

import keras

from t2t_repro.training.learning_rate import schedule_from_hparams


def _adam_class():
    if keras.backend.backend() == "tensorflow":
        from t2t_repro.training.tensorflow.fused_adam import FusedAdam
        return FusedAdam
    return keras.optimizers.Adam


def create_optimizer(hparams):
    adam = _adam_class()(
        learning_rate=schedule_from_hparams(hparams),
        beta_1=hparams.optimizer_adam_beta1,
        beta_2=hparams.optimizer_adam_beta2,
        epsilon=hparams.optimizer_adam_epsilon,
    )
    if hparams.dtype_policy == "mixed_float16":
        return keras.optimizers.LossScaleOptimizer(adam)
    return adam
