"""Decoding in less than 32 bits: a copy of a trained model that holds its weights and
computes in bfloat16, or whose dense layers hold int8 weights (Keras's weight quantization)."""

import contextlib
import gc
import warnings

from t2t_repro.decoding.ensemble import Ensemble

PRECISIONS = ("float32", "bfloat16", "int8")


def model_in_precision(model, precision):
    """`model` itself for "float32"; otherwise a copy with its weights that computes in
    `precision` (for an `Ensemble`, an ensemble of its members' copies):
      - "bfloat16": every layer computes in bfloat16, as under Keras's mixed_bfloat16
        policy, but holds its weights in bfloat16 (rounded once instead of at every read, so
        each matmul reads half the bytes: on CPUs with bfloat16 instructions that is what makes
        it faster than float32); the attention softmax, layer normalization's statistics and
        the search's scores stay float32;
      - "int8": every Dense layer (the attention and feed-forward projections) holds int8
        weights with a scale per output unit and quantizes its input per token
        (`keras.Model.quantize("int8")`); the shared embedding and output projection, the
        LayerNorms and the position encodings stay float32.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got '{precision}'.")
    if precision == "float32":
        return model
    if isinstance(model, Ensemble):
        return Ensemble([model_in_precision(member, precision) for member in model.models],
                        names=model.names)
    policy = "bfloat16" if precision == "bfloat16" else "float32"
    copy = type(model)(model.hparams, model.input_vocab_size, model.target_vocab_size,
                       decoding_copy=True, dtype=policy).build_weights()
    copy.set_weights(model.get_weights())
    if precision == "int8":
        with warnings.catch_warnings(), one_garbage_collection():
            # A warning per layer Keras leaves as it is (norms, embedding).
            warnings.filterwarnings("ignore", message="Layer .* does not have a `quantize`")
            copy.quantize("int8")
    return copy


@contextlib.contextmanager
def one_garbage_collection():
    """Keras runs a full garbage collection for every float kernel a quantized layer drops
    (to free its device buffer), which costs seconds per layer in a process holding much; one
    collection at the end frees the same buffers."""
    collect = gc.collect
    gc.collect = lambda generation=2: 0
    try:
        yield
    finally:
        gc.collect = collect
        gc.collect()
