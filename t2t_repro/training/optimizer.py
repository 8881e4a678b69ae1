"""The paper's optimizer: Adam with β1 0.9, β2 0.98, ε 1e-9 on the factor schedule (§5.3)."""

import keras

from t2t_repro.training.learning_rate import schedule_from_hparams


def create_optimizer(hparams):
    return keras.optimizers.Adam(
        learning_rate=schedule_from_hparams(hparams),
        beta_1=hparams.optimizer_adam_beta1,
        beta_2=hparams.optimizer_adam_beta2,
        epsilon=hparams.optimizer_adam_epsilon,
        global_clipnorm=hparams.clip_grad_norm or None,
    )
