"""Imports TensorFlow with oneDNN on and without its C++ start-up lines that read like failures
on a machine without a GPU, keeping everything else it prints. Every `python -m
t2t_repro.<command>` that needs TensorFlow calls `import_tensorflow()` first.

TensorFlow turns its oneDNN kernels on by default only on CPUs with AVX-512; on AVX2 CPUs they
make beam search and the training step markedly faster too (docs/performance.md, "oneDNN on every
CPU"), so the commands turn them on everywhere unless TF_ENABLE_ONEDNN_OPTS is set.

The lines come from C++ before Python's logging exists, and TF_CPP_MIN_LOG_LEVEL=2 does not stop
them: absl prints every message (even INFO) until it is initialised, and the cuInit failure is
an ERROR; with oneDNN on, an INFO line says so, twice.
Hiding CUDA devices (CUDA_VISIBLE_DEVICES=-1) does not avoid the cuInit call either.
So stderr (file descriptor 2, which C++ writes to) is captured while TensorFlow is imported and
looks for devices, and afterwards every captured line is written back except these known ones.

Importing TensorFlow also imports JAX where it is installed (for TFLite's JAX converter) and
Keras's image-gallery plot imports matplotlib.pyplot: a quarter of the import's time, for
nothing a command uses (docs/performance.md, "Start-up"). Both are kept out while TensorFlow is
imported; a command that needs either imports it afterwards as usual.

The import makes about 450,000 objects that live as long as the process, and Python's automatic
garbage collections, run again and again as their number grows, walk them each time: a quarter
of the import's time again. So collection is paused while TensorFlow is imported, and what the
import made is then frozen (`gc.freeze`), out of every later collection's sight.
"""

import contextlib
import gc
import os
import re
import sys

from t2t_repro.utils import backend
from t2t_repro.utils.stderr_lines import stderr_filtered, without_lines

_ABSL_PREAMBLE = re.compile(
    r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$"
)
_NO_CUDA_DRIVER = re.compile(r"^I\d{4} .*cudart_stub\.cc:\d+\] Could not find cuda drivers")
# With oneDNN on, an INFO notice of that.
_ONEDNN_ON = re.compile(r"^I\d{4} .*\] oneDNN custom operations are on\.")
# Noise only when there is no CUDA driver at all; with one, a failed cuInit is a real error.
_CUINIT_FAILED = re.compile(r"^E\d{4} .*\] failed call to cuInit: ")


def without_startup_noise(text):
    """`text` (captured stderr) without the known start-up lines of a machine without a GPU."""
    noise = [_ABSL_PREAMBLE, _NO_CUDA_DRIVER, _ONEDNN_ON]
    if any(_NO_CUDA_DRIVER.match(line) for line in text.splitlines()):
        noise.append(_CUINIT_FAILED)
    return without_lines(text, noise)


def startup_noise_filtered():
    """Captures file descriptor 2 for a block, then writes back all but the start-up noise
    (even when the block raises)."""
    return stderr_filtered(without_startup_noise)


# Imported by TensorFlow's and Keras's own imports when installed, each in a try block.
OPTIONAL_IMPORTS_NO_COMMAND_USES = ("jax", "matplotlib")


@contextlib.contextmanager
def unimportable(*names):
    """Inside the block, importing any of `names` (not imported yet) raises ImportError, as if
    it were not installed; after it, they import as usual."""
    blocked = [name for name in names if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # what the import system reads as "not importable"
    try:
        yield
    finally:
        for name in blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


@contextlib.contextmanager
def collection_paused_then_frozen():
    """No automatic garbage collection inside the block; afterwards every object alive is
    frozen (`gc.freeze`: left out of all later collections) and collection resumes as it was."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


def keras_on_tensorflow():
    """Has Keras, not imported yet, start on TensorFlow when another backend is named
    (KERAS_BACKEND or keras.json, as set for the trainer on JAX), saying so on stderr: a
    command that calls `import_tensorflow` runs on TensorFlow only, and TensorFlow's import
    loads Keras, which would start that backend half-way (without JAX, kept out above) and
    fail at the first layer."""
    name = backend.keras_backend_name()
    if name == "tensorflow" or "keras" in sys.modules:
        return
    os.environ["KERAS_BACKEND"] = "tensorflow"
    print(f"note: Keras's backend {name} is for the trainer; this command runs Keras on "
          f"TensorFlow.", file=sys.stderr)


def import_tensorflow():
    """Imports TensorFlow with oneDNN on (unless TF_ENABLE_ONEDNN_OPTS says otherwise) and
    enumerates its devices (where cuInit is called) quietly. Garbage collection is paused for
    the first import only: a process that has TensorFlow already (a test, a notebook) keeps its
    own objects collectable."""
    # CPU-feature and oneDNN notices are INFO lines that this level does stop.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    keras_on_tensorflow()
    first_import = "tensorflow" not in sys.modules
    with (startup_noise_filtered(), unimportable(*OPTIONAL_IMPORTS_NO_COMMAND_USES),
          collection_paused_then_frozen() if first_import else contextlib.nullcontext()):
        import tensorflow as tf

        tf.config.list_physical_devices()
