"""tf.distribute strategies by name: one machine (Mirrored) or several (MultiWorkerMirrored)."""

import tensorflow as tf

STRATEGIES = ("auto", "default", "mirrored", "multi_worker")


def create_strategy(name="auto"):
    """Returns the named strategy.

    auto: MirroredStrategy over all GPUs when there are several, else the default strategy.
    default: no distribution (one device). mirrored: MirroredStrategy over the local devices.
    multi_worker: MultiWorkerMirroredStrategy, configured by the TF_CONFIG environment variable.
    """
    if name == "auto":
        name = "mirrored" if len(tf.config.list_logical_devices("GPU")) > 1 else "default"
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise ValueError(f"Unknown strategy '{name}'. Choose one of: {', '.join(STRATEGIES)}.")
