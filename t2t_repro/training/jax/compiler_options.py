"""XLA compiler options for the jitted train step.

XLA's CPU compiler in jaxlib 0.10 (the version measured) hands dots and the elementwise
chains around them to YNNPACK fusions by default. XLA then gives the transformer's train
step four vocabulary-wide buffers at once: the logits, their softmax and the logits' gradient
twice (once transposed for the shared embedding's gradient), about 0.6 GB each on a
4,096-token batch with 37,000 pieces. Without those fusions the step's compiled temporaries on
`bench packing`'s packed batch are 5.1 GiB instead of 7.2 GiB, and the step is faster
(figures in docs/performance.md). The option is one of XLA's CPU compiler's; a GPU's compiler
does not read it.
"""

import functools

import jax
import numpy as np

WITHOUT_YNNPACK_FUSIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}


@functools.cache
def train_step_jit_options():
    """Keyword arguments of `jax.jit` for the train step: `WITHOUT_YNNPACK_FUSIONS` as its
    compiler options where this jax and jaxlib take them, else none (a jaxlib without the option
    rejects it, and a jax without `compiler_options` rejects the argument)."""
    options = {"compiler_options": WITHOUT_YNNPACK_FUSIONS}
    try:
        jax.jit(lambda x: x + 1, **options).lower(np.float32(0)).compile()
    except (TypeError, RuntimeError):  # jit without compiler_options; an unknown option
        return {}
    return options
