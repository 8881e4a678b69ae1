"""Fine-tuning an imported run for one step on both backends, and how far its weights moved:
an imported model is fine-tuned, not trained afresh, when one Adam step at the warm-up's first
learning rate (about 7e-7) moves each weight by about that, where a fresh model would differ by
its initialisation's scale."""

import os
import subprocess
import sys

import h5py
import numpy as np

from conftest import HANG_GUARD_S, run_module


def fine_tune_one_step_on_both_backends(run, problem_flags, output_root):
    """Trains one step from `run` with --warm_start_from on TensorFlow (in this process) and on
    JAX (a process of its own, at the same time); returns the two new run folders."""
    fine_tune = [*problem_flags, f"--warm_start_from={run}", "--hparams=batch_size=1024",
                 "--train_steps=1", "--schedule=train"]
    runs = {"tensorflow": output_root / "tuned", "jax": output_root / "tuned_jax"}
    on_jax = subprocess.Popen(
        [sys.executable, "-m", "t2t_repro.trainer", *fine_tune, f"--output_dir={runs['jax']}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="2"))
    tuned = run_module("t2t_repro.trainer", *fine_tune, f"--output_dir={runs['tensorflow']}")
    assert tuned.returncode == 0, tuned.stderr
    _, errors = on_jax.communicate(timeout=HANG_GUARD_S)
    assert on_jax.returncode == 0, errors
    return runs


def largest_weight_move(start, tuned):
    """The largest change of any model weight (optimizer slots aside) between two Keras
    checkpoints of the same model."""
    def model_weights(path):
        arrays = {}
        with h5py.File(path, "r") as f:
            f.visititems(lambda name, item: arrays.__setitem__(name, item[()])
                         if isinstance(item, h5py.Dataset) and not name.startswith("optimizer")
                         else None)
        return arrays

    before, after = model_weights(start), model_weights(tuned)
    assert before.keys() == after.keys()
    return max(float(np.max(np.abs(after[name] - before[name]))) for name in before)
