"""For the JAX subprocesses of test_jax_training: a run that imported TensorFlow fails."""

import os
import sys

TENSORFLOW_PACKAGES = ("tensorflow", "tensorflow_text", "tensorflow_datasets")


def exit_if_tensorflow_was_imported():
    """Exits with status 3, naming them, if any TensorFlow modules were imported."""
    imported = sorted(name for name in sys.modules if name.split(".")[0] in TENSORFLOW_PACKAGES)
    if imported:
        print(f"error: TensorFlow was imported: {', '.join(imported[:5])}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(3)
