"""The Keras backend a command will run on, known before Keras is imported: entry points
import TensorFlow (quietly, `quiet_tensorflow`) only when it is the backend."""

import json
import os


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
