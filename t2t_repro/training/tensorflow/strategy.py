"""tf.distribute strategies by name: one machine (Mirrored) or several (MultiWorkerMirrored),
and what a multi-worker run needs besides: who writes, and how a lost worker is reported."""

import json
import os
import re

import tensorflow as tf

from t2t_repro.training.strategy_names import STRATEGIES, StrategyError
# A collective that waits longer than this for a peer fails instead of hanging: long enough
# for a first step's compilation or an evaluation on the other workers.
COLLECTIVE_TIMEOUT_SECONDS = 30 * 60
_TF_CONFIG_EXAMPLE = ('{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
                      '"task": {"type": "worker", "index": 0}}')


def create_strategy(name="auto"):
    """Returns the named strategy.

    auto: MirroredStrategy over all GPUs when there are several, else the default strategy.
    default: no distribution (one device). mirrored: MirroredStrategy over the local devices.
    multi_worker: MultiWorkerMirroredStrategy, configured by the TF_CONFIG environment variable;
    its collectives time out after COLLECTIVE_TIMEOUT_SECONDS.
    """
    if name == "auto":
        name = "mirrored" if len(tf.config.list_logical_devices("GPU")) > 1 else "default"
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker":
        _check_tf_config()
        return tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(
                timeout_seconds=COLLECTIVE_TIMEOUT_SECONDS))
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


def _check_tf_config():
    problem = tf_config_problem(os.environ.get("TF_CONFIG"))
    if problem:
        raise StrategyError(
            f"--strategy=multi_worker needs every worker's address and its own task in the "
            f"TF_CONFIG environment variable, but {problem}. Example for worker 0 of two: "
            f"TF_CONFIG='{_TF_CONFIG_EXAMPLE}'.")


def tf_config_problem(text):
    """What makes TF_CONFIG's `text` unusable for a multi-worker run, or None: the cases
    MultiWorkerMirroredStrategy would otherwise answer with a traceback (a task index past the
    cluster's list, a task type the cluster lacks, parameter servers or evaluators, which this
    trainer has no use for)."""
    if not text:
        return "TF_CONFIG is not set"
    try:
        config = json.loads(text)
    except ValueError as error:
        return f"TF_CONFIG is not JSON ({error})"
    if not isinstance(config, dict) or not isinstance(config.get("cluster"), dict):
        return 'TF_CONFIG has no "cluster" object'
    cluster = config["cluster"]
    if not cluster:
        return "TF_CONFIG's cluster names no task"
    others = sorted(set(cluster) - set(_TASK_TYPES))
    if others:
        return (f"TF_CONFIG's cluster names {', '.join(others)} tasks, where a multi-worker "
                f"run has only {' and '.join(_TASK_TYPES)} tasks")
    for task_type, addresses in cluster.items():
        if not _is_address_list(addresses):
            return (f'TF_CONFIG\'s cluster "{task_type}" is not a list of "host:port" '
                    f'addresses')
    if len(cluster.get("chief", [])) > 1:
        return "TF_CONFIG's cluster names more than one chief"
    task = config.get("task")
    if not isinstance(task, dict):
        return 'TF_CONFIG has no "task" object'
    task_type, index = task.get("type"), task.get("index")
    if task_type not in cluster:
        return (f"TF_CONFIG's task type {task_type!r} has no addresses in its cluster, "
                f"which names {' and '.join(cluster)}")
    count = len(cluster[task_type])
    if _as_index(index) not in range(count):
        return (f"TF_CONFIG's task index {index!r} names no {task_type} of its cluster, "
                f"which lists {count} (index 0 to {count - 1})")
    return None


_TASK_TYPES = ("chief", "worker")


def _is_address_list(addresses):
    return (isinstance(addresses, list) and addresses
            and all(isinstance(address, str) and re.fullmatch(r".+:\d+", address)
                    for address in addresses))


def _as_index(index):
    """The task index as TensorFlow reads it (`int(index)`), or None."""
    if isinstance(index, bool):
        return None
    try:
        return int(index)
    except (TypeError, ValueError):
        return None


def worker_failure_errors():
    """What a collective raises when a peer worker died, restarted or cannot be reached."""
    return (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
            tf.errors.FailedPreconditionError, tf.errors.CancelledError)


def describe_worker_failure(error, newest_checkpoint):
    """A one-line account of a lost worker, and what to do about it."""
    lines = [line.strip() for line in (error.message or str(error)).splitlines() if line.strip()]
    telling = [line for line in lines if re.search(r"abort|onnect|reach|time|eadline", line)]
    first_line = (telling or lines or [""])[0][:300]
    resume = (f"training resumes from {newest_checkpoint}" if newest_checkpoint
              else "no checkpoint was written yet, so training starts again")
    return (f"another worker of this multi-worker run stopped or cannot be reached "
            f"({type(error).__name__}: {first_line}). Restart every worker with the same "
            f"command and TF_CONFIG: {resume}.")
