"""The JAX half of test_jax_training: run as a script with KERAS_BACKEND=jax and two host
devices; it fails if it imported any TensorFlow module.

    python jax_worker.py CASES.npz OUTPUT_DIR

CASES.npz holds a TensorFlow-written checkpoint's path (`checkpoint`), the hparams overrides
(`hparams`), a clipping norm (`clip_norm`) and two micro-batches (`a_*`, `b_*`) and their
union (`union_*`). From that checkpoint's weights this writes to OUTPUT_DIR/results.npz:
- logits: the model's logits on the union batch (a TensorFlow checkpoint read by JAX);
- one_step_*: loss and weights after one update on the union (written also as the checkpoint
  OUTPUT_DIR/jax-step.weights.h5, for TensorFlow to read back);
- accumulated_*: after one update from the two micro-batches (accumulation_steps=2), clipped
  to clip_norm;
- two_devices_*: after one update on the union split over 2 devices by `DataParallel`;
- packed_*: after one update on the union's pairs packed into rows (`packed_*` in CASES.npz,
  the keys of `pair_packing.PACKED_KEYS`);
- ynnpack_fusions: how many YNNPACK fusions XLA compiles into the step's update on the union,
  as the train step jits it (`compiler_options`) and as a plain `jax.jit` would;
- ahead_*, plain_*: weights after updates started ahead and after plain ones
  (`lookahead_cases`);
- float16_*: under mixed_float16 (loss scaling), after one update from the two micro-batches
  clipped to clip_norm: loss, weights, Adam's first moments (`float16_moment_*`), the update
  count and the loss scale; float16_overflow_*: the same update with the loss scale planted at
  2^100, so that the scaled gradients overflow;
- embedding_gradient: the gradient of Σ embed(`embedding_ids`) · `embedding_weights` with
  respect to the matrix of a mixed_bfloat16 `SharedEmbedding` of `embedding_shape`, and
  embedding_scatter_types: the element types of the scatters that gradient's program holds.
"""

import os
import re
import sys

os.environ["KERAS_BACKEND"] = "jax"
os.environ["XLA_FLAGS"] = " ".join(  # after the flags the tests give every process
    [os.environ.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=2"]).strip()
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

from step_cases import adam_moments, new_model  # noqa: E402
from tensorflow_modules import exit_if_tensorflow_was_imported  # noqa: E402
from t2t_repro.hparams import create_hparams  # noqa: E402
from t2t_repro.layers import SharedEmbedding  # noqa: E402
from t2t_repro.training.jax.run import data_parallel_placement  # noqa: E402
from t2t_repro.training.jax.train_step import JaxTrainStep  # noqa: E402


def batch(cases, name):
    features = {key[len(name) + 1:]: cases[key] for key in cases.files
                if key.startswith(f"{name}_")}
    return features, features["targets"]


def new_step(model, accumulation_steps=1, **options):
    return JaxTrainStep(model, model_hparams.label_smoothing,
                        accumulation_steps=accumulation_steps, **options)


def one_update(model, batches, step=None, **options):
    step = step or new_step(model, len(batches), **options)
    stats = step(iter(batches))
    return stats.loss_sum / stats.target_tokens, [np.asarray(w) for w in model.get_weights()]


def ynnpack_fusions(step, model, batch):
    """[in the train step's compiled update, in the same update under a plain jax.jit]."""
    arguments = ([v.value for v in model.trainable_variables],
                 [v.value for v in model.non_trainable_variables],
                 [v.value for v in model.optimizer.variables], None, batch, np.float32(1))
    return [jitted.lower(*arguments).compile().as_text().count("__ynn_fusion")
            for jitted in (step._update, jax.jit(step._apply_update))]


def mixed_precision_embedding_gradient(shape, ids, weights):
    """(d/dE of Σ embed(ids) · weights for a mixed_bfloat16 SharedEmbedding with matrix E, the
    element types of the scatters in that gradient's HLO before XLA optimises it: what the
    program asks for, which XLA on a CPU computes in float32 whatever it is)."""
    layer = SharedEmbedding(*shape, dtype="mixed_bfloat16")
    layer.build()

    def weighted_sum(matrix):
        with keras.StatelessScope(state_mapping=[(layer.embeddings, matrix)]):
            embedded = layer(ids)  # through __call__, which casts variables for the policy
        return jnp.sum(embedded.astype("float32") * weights)

    gradient = jax.jit(jax.grad(weighted_sum))
    hlo = gradient.lower(layer.embeddings.value).as_text(dialect="hlo")
    scatter_types = re.findall(r"= (\w+)\[[\d,]*\](?:\{[\d,]*\})? scatter\(", hlo)
    return np.asarray(gradient(layer.embeddings.value)), np.array(scatter_types)


def lookahead_cases(model, plain, union):
    """Weights after updates of a step that starts each next update ahead (`ahead_<case>_*`)
    and of `plain`, a step on `model` without lookahead (`plain_<case>_*`), both on `model`
    from the checkpoint's weights, on `union` and two batches of its shape (one compiled
    update each) that pair its sources with other targets:
    in_order (three updates from one iterator, which ends while the third's successor is
    pulled), reassigned (the weights loaded again between two calls: the second update starts
    from them), new_iterator (the second call takes another iterator's batch, not the first
    iterator's pulled ahead), failing (an iterator that raises after one batch: the first
    call returns its update, the second raises the error, `ahead_failing_error`) and
    accumulated (two updates of two micro-batches each, against a plain step of two)."""
    first, second, third = union, *(re_paired(union, shift) for shift in (1, 2))
    ahead = new_step(model, lookahead=True)
    results = {}

    def record(name, calls):
        model.load_weights(str(cases["checkpoint"]))
        for call in calls:
            call()
        results.update({f"{name}_weight_{i}": np.asarray(w)
                        for i, w in enumerate(model.get_weights())})

    one = iter([first, second, third])
    record("ahead_in_order", [lambda: ahead(one)] * 3)
    record("plain_in_order", [lambda: plain(iter([first])), lambda: plain(iter([second])),
                              lambda: plain(iter([third]))])
    two = iter([first, second])
    record("ahead_reassigned", [lambda: ahead(two),
                                lambda: model.load_weights(str(cases["checkpoint"])),
                                lambda: ahead(two)])
    record("plain_reassigned", [lambda: plain(iter([second]))])
    record("ahead_new_iterator", [lambda: ahead(iter([first, second])),
                                  lambda: ahead(iter([third]))])
    record("plain_new_iterator", [lambda: plain(iter([first])), lambda: plain(iter([third]))])
    breaking = failing_after([first])
    record("ahead_failing", [lambda: ahead(breaking)])
    try:
        ahead(breaking)
    except ValueError as error:
        results["ahead_failing_error"] = str(error)
    record("plain_failing", [lambda: plain(iter([first]))])
    pairs, ahead_two = iter([first, second, third, first]), new_step(model, 2, lookahead=True)
    plain_two = new_step(model, 2, lookahead=False)
    record("ahead_accumulated", [lambda: ahead_two(pairs)] * 2)
    record("plain_accumulated", [lambda: plain_two(iter([first, second])),
                                 lambda: plain_two(iter([third, first]))])
    return results


def float16_cases(micro_batches, clip_norm):
    """`float16_*` and `float16_overflow_*` (module docstring)."""
    hparams = create_hparams("transformer_tiny",
                             f"{cases['hparams']},dtype_policy=mixed_float16")
    model = new_model(hparams, dtype_policy="mixed_float16")
    step = JaxTrainStep(model, hparams.label_smoothing, accumulation_steps=2,
                        clip_norm=clip_norm)  # compiled once for both cases
    results = {}
    for name, planted_scale in (("float16", None), ("float16_overflow", 2.0 ** 100)):
        model.load_weights(str(cases["checkpoint"]))
        for variable in model.optimizer.variables:
            variable.assign(np.zeros(variable.shape, variable.dtype))
        model.optimizer.dynamic_scale.assign(planted_scale or model.optimizer.initial_scale)
        stats = step(iter(micro_batches))
        results.update({f"{name}_loss": stats.loss_sum / stats.target_tokens,
                        f"{name}_finite": stats.finite,
                        f"{name}_iterations": int(model.optimizer.iterations.value),
                        f"{name}_scale": float(model.optimizer.dynamic_scale.value)})
        results.update({f"{name}_weight_{i}": np.asarray(w)
                        for i, w in enumerate(model.get_weights())})
        results.update({f"{name}_moment_{i}": m for i, m in enumerate(adam_moments(model))})
    return results


def re_paired(batch, shift):
    """`batch` with its sources moved `shift` rows down: another batch of the same shape."""
    features, targets = batch
    return {**features, "inputs": np.roll(features["inputs"], shift, axis=0)}, targets


def failing_after(batches):
    """Yields `batches`, then raises as a broken data file would."""
    yield from batches
    raise ValueError("the data broke")


def restored_model():
    model = new_model(model_hparams)
    model.load_weights(str(cases["checkpoint"]))
    return model


cases = np.load(sys.argv[1])
output_dir = sys.argv[2]
model_hparams = create_hparams("transformer_tiny", str(cases["hparams"]))
results = {}
union = batch(cases, "union")

model = restored_model()
results["logits"] = keras.ops.convert_to_numpy(model(union[0], training=False))
step = new_step(model, lookahead=False)  # compiled once: the count, the update, lookahead_cases
results["ynnpack_fusions"] = ynnpack_fusions(step, model, union)
loss, weights = one_update(model, [union], step)
model.save_weights(os.path.join(output_dir, "jax-step.weights.h5"))
results["one_step_loss"] = loss
results.update({f"one_step_weight_{i}": w for i, w in enumerate(weights)})

loss, weights = one_update(restored_model(), [batch(cases, "a"), batch(cases, "b")],
                           clip_norm=float(cases["clip_norm"]))
results["accumulated_loss"] = loss
results.update({f"accumulated_weight_{i}": w for i, w in enumerate(weights)})

place = data_parallel_placement(jax.devices()[:2])
loss, weights = one_update(restored_model(), [union], place_batch=place)
results["two_devices_loss"] = loss
results.update({f"two_devices_weight_{i}": w for i, w in enumerate(weights)})

loss, weights = one_update(restored_model(), [batch(cases, "packed")])
results["packed_loss"] = loss
results.update({f"packed_weight_{i}": w for i, w in enumerate(weights)})

results.update(lookahead_cases(model, step, union))
results.update(float16_cases([batch(cases, "a"), batch(cases, "b")], float(cases["clip_norm"])))

results["embedding_gradient"], results["embedding_scatter_types"] = (
    mixed_precision_embedding_gradient(
        tuple(cases["embedding_shape"]), cases["embedding_ids"], cases["embedding_weights"]))

np.savez(os.path.join(output_dir, "results.npz"), **results)
exit_if_tensorflow_was_imported()
