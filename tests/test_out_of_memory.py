"""A backend that cannot allocate what a command asks becomes one line saying what to lower:
real allocation failures of JAX and NumPy (each asks for more bytes than a 64-bit process can
address, so it fails at once on any machine without touching memory), and TensorFlow's error
as `tf.zeros([2**48])` raises it (made here from its text: TensorFlow retries a failed
allocation for 10 s before it raises)."""

import numpy as np
import pytest

from conftest import NUMPY_OUT_OF_MEMORY, UNADDRESSABLE_FLOATS as UNADDRESSABLE
from conftest import allocate_unaddressable as numpy_allocation
from t2t_repro.utils.out_of_memory import (
    OutOfMemoryError, advice_when_out_of_memory, is_out_of_memory)


def jax_allocation():
    jnp = pytest.importorskip("jax.numpy")
    jnp.zeros((UNADDRESSABLE,), np.float32).block_until_ready()


def tensorflow_allocation():
    import tensorflow as tf

    raise tf.errors.ResourceExhaustedError(None, None, (
        "{{function_node __wrapped__Fill_device_/job:localhost/replica:0/task:0/device:CPU:0}} "
        f"OOM when allocating tensor with shape[{UNADDRESSABLE}] and type float on "
        "/job:localhost/replica:0/task:0/device:CPU:0 by allocator mklcpu [Op:Fill] name: "))


@pytest.mark.parametrize("allocate, allocation", [
    (tensorflow_allocation, f"OOM when allocating tensor with shape[{UNADDRESSABLE}]"),
    (jax_allocation, f"Out of memory allocating {UNADDRESSABLE * 4} bytes"),
    (numpy_allocation, NUMPY_OUT_OF_MEMORY),
])
def test_a_backends_failed_allocation_is_one_line_naming_it_and_the_advice(allocate,
                                                                          allocation):
    with pytest.raises(Exception) as raised:
        allocate()
    assert is_out_of_memory(raised.value)
    with pytest.raises(OutOfMemoryError) as reported:
        with advice_when_out_of_memory("decoding", "lower beam_size."):
            allocate()
    assert str(reported.value) == f"decoding ran out of memory ({allocation}); lower beam_size."


@pytest.mark.parametrize("error", [ValueError("shape"), RuntimeError("INVALID_ARGUMENT: x"),
                                   KeyError("OutOfMemoryError")])
def test_other_errors_pass_through_unchanged(error):
    assert not is_out_of_memory(error)
    with pytest.raises(type(error)) as raised:
        with advice_when_out_of_memory("decoding", "lower beam_size."):
            raise error
    assert raised.value is error
