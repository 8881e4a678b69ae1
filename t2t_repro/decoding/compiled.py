"""Compiles a function of tensors for the Keras backend in use: tf.function under TensorFlow
(with XLA when asked), jax.jit under JAX, plain eager calls otherwise."""

import keras


def compile_for_backend(fn, variables=(), jit_compile=False, fixed_shapes=True):
    """`fn` compiled for the current backend.

    Args:
        fn: a function of tensors (and nested lists/tuples/dicts of them) returning the same.
        variables: the Keras variables `fn` reads (a model's `variables`). JAX traces pure
            functions, so under JAX their values are passed in as arguments through a
            `keras.StatelessScope` instead of being baked into the compiled program.
        jit_compile: compile the TensorFlow graph with XLA too.
        fixed_shapes: whether `fn`'s shapes depend only on its arguments' shapes; JAX can
            trace nothing else, so without it `fn` runs eagerly under JAX.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        # Written in keras.ops without Python control flow on tensors (JAX traces it too), so
        # autograph has nothing to convert; left on, it rewrites the model's and the search's
        # code in every new process, 1.5 s of the first search's tracing.
        return tf.function(fn, jit_compile=jit_compile, reduce_retracing=True, autograph=False)
    if backend == "jax" and fixed_shapes:
        import jax

        variables = list(variables)

        def stateless(values, *args):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return fn(*args)

        jitted = jax.jit(stateless)
        return lambda *args: jitted([variable.value for variable in variables], *args)
    return fn
