"""The Keras backend a command will run on, known before Keras is imported: entry points
import TensorFlow (quietly, `quiet_tensorflow`) only when it is the backend."""

import importlib.abc
import json
import os
import sys


def keras_backend_name():
    """As Keras decides: `KERAS_BACKEND`, else the "backend" of `$KERAS_HOME/keras.json`
    (default `~/.keras/keras.json`), else "tensorflow"."""
    name = os.environ.get("KERAS_BACKEND")
    if name:
        return name
    keras_home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(keras_home, "keras.json")) as f:
            return json.load(f).get("backend", "tensorflow")
    except (OSError, ValueError):
        return "tensorflow"


def is_tensorflow():
    return keras_backend_name() == "tensorflow"


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
