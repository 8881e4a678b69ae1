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


def is_chief(strategy):
    """Whether this process writes the run's files: always, except on a multi-worker run's
    workers other than the chief (task "chief", or "worker" 0 when no chief is named)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    if resolver.task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief


def is_multi_worker(strategy):
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def local_gpu_peak_tflops(dtype):
    """Peak TFLOPS at `dtype` of this machine's first GPU, if it is in `peak_flops`'s table;
    None without a GPU or for an unknown one."""
    from t2t_repro.training.peak_flops import peak_tflops

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "")
    return peak_tflops(name, dtype)
