"""The Keras backend a command will run on, known before Keras is imported: entry points
import TensorFlow (quietly, `quiet_tensorflow`) only when it is the backend."""

import importlib.abc
import json
import os
import sys

from t2t_repro.errors import ConfigurationError


# The backends the trainer trains on (`training.run_factory`), as Keras names them.
TRAINING_BACKENDS = ("tensorflow", "jax")


def keras_backend_name():
    """As Keras decides: `KERAS_BACKEND`, else the "backend" of `$KERAS_HOME/keras.json`
    (default `~/.keras/keras.json`), else "tensorflow"."""
    return _named_backend()[0]


def _named_backend():
    """(the backend's name, where it is named: "KERAS_BACKEND", the keras.json file, or None
    for Keras's default)."""
    name = os.environ.get("KERAS_BACKEND")
    if name:
        return name, "KERAS_BACKEND"
    keras_home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    path = os.path.join(keras_home, "keras.json")
    try:
        with open(path) as f:
            return str(json.load(f).get("backend", "tensorflow")), path
    except (OSError, ValueError, AttributeError):
        return "tensorflow", None


def is_tensorflow():
    return keras_backend_name() == "tensorflow"


def check_training_backend():
    """ConfigurationError, before Keras is imported, when the backend named is not one the
    trainer trains on (Keras would fail to import it, or train without gradients)."""
    name, source = _named_backend()
    if name in TRAINING_BACKENDS:
        return
    named = f"KERAS_BACKEND={name}" if source == "KERAS_BACKEND" else (
        f"backend {name!r} in {source}")
    spelling = f" (Keras spells it {name.lower()})" if name.lower() in TRAINING_BACKENDS else ""
    raise ConfigurationError(f"{named}: the trainer trains on tensorflow or jax{spelling}; set "
                             f"KERAS_BACKEND=tensorflow or KERAS_BACKEND=jax.")


class _HideTensorFlow(importlib.abc.MetaPathFinder):
    """Makes `import tensorflow` fail, as where it is not installed."""

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] == "tensorflow":
            raise ModuleNotFoundError(f"No module named '{name}' (hidden)", name=name)
        return None


def set_random_seed(seed):
    """`keras.utils.set_random_seed`: Python's, NumPy's and Keras's seeds. Keras also seeds
    TensorFlow wherever it is installed, importing it; on another backend it is hidden from
    that call, so that training on JAX imports no TensorFlow (its tf.data is not used there)."""
    import keras

    if is_tensorflow():
        keras.utils.set_random_seed(seed)
        return
    hide = _HideTensorFlow()
    sys.meta_path.insert(0, hide)
    try:
        keras.utils.set_random_seed(seed)
    finally:
        sys.meta_path.remove(hide)
