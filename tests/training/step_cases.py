"""Batches and models shared by the training-step tests: micro-batches with unequal token
counts, their union as one padded batch, and a tiny Transformer compiled as the trainer does."""

import keras
import numpy as np

from t2t_repro.utils import backend

VOCAB = 12
# Adam divides by √v + ε: with the paper's ε = 1e-9, a gradient entry near 1e-9 (a sum that
# nearly cancels) makes the update lr·g/(|g| + ε) swing by up to lr on float32 rounding alone,
# whatever the batch split. ε = 1e-4 keeps the update linear there, so weights can be compared
# within 1e-6 after a learning rate of ~0.01 moved them; moments compare the gradients exactly.
# One layer: what these tests compare (how a loss is split over batches, replicas and
# backends) does not depend on depth, and a one-layer step traces in half the time.
HPARAMS = ("layer_prepostprocess_dropout=0.0,learning_rate_constant=0.5,"
           "learning_rate_warmup_steps=4,optimizer_adam_epsilon=1e-4,num_hidden_layers=1")


def micro_batch(seed, rows, source_length, target_length):
    """`(features, targets)` of random ids; each row has its own number of real tokens
    (at least 1), then padding."""
    rng = np.random.default_rng(seed)
    inputs = rng.integers(2, VOCAB, (rows, source_length)).astype("int32")
    targets = rng.integers(2, VOCAB, (rows, target_length)).astype("int32")
    for row in range(rows):
        inputs[row, rng.integers(1, source_length + 1):] = 0
        targets[row, rng.integers(1, target_length + 1):] = 0
    return {"inputs": inputs, "targets": targets}, targets


def filler_batch(rows, source_length, target_length):
    """Rows of padding only, as the pipeline adds to fill a replica's batch."""
    inputs = np.zeros((rows, source_length), "int32")
    targets = np.zeros((rows, target_length), "int32")
    return {"inputs": inputs, "targets": targets}, targets


def union(batches):
    """The batches as one: rows concatenated, each padded with 0 to the longest length."""
    def stack(arrays):
        length = max(a.shape[1] for a in arrays)
        return np.concatenate([np.pad(a, ((0, 0), (0, length - a.shape[1]))) for a in arrays])

    inputs = stack([features["inputs"] for features, _ in batches])
    targets = stack([targets for _, targets in batches])
    return {"inputs": inputs, "targets": targets}, targets


def token_counts(batches):
    return [int((targets != 0).sum()) for _, targets in batches]


def new_model(hparams, seed=1, dtype_policy="float32"):
    """transformer_tiny compiled for training (its optimizer built), the same weights for
    the same seed."""
    from t2t_repro.models.transformer import Transformer
    from t2t_repro.training.run import compile_for_training

    backend.set_random_seed(seed)  # under JAX too, without importing TensorFlow
    model = Transformer(hparams, VOCAB, VOCAB, dtype=dtype_policy).build_weights()
    return compile_for_training(model, hparams)


def adam_moments(model):
    """Adam's first moments, in the optimizer's order: after one update, (1 - β1)·gradient,
    so they compare the gradients themselves (Adam's first step is nearly sign(gradient))."""
    return [keras.ops.convert_to_numpy(v) for v in model.optimizer.variables
            if v.path.endswith("_momentum")]
