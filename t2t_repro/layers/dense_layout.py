"""Dense layers' products by copies of their kernels laid out [units, inputs], for a decoding
loop that makes the copies once per batch.

TensorFlow runs a float32 MatMul with oneDNN; on an x86 CPU without AVX-512 oneDNN multiplies
128 decoding rows by the decoder's kernels 1.3-2x faster given each kernel as the transposed
operand than as stored (docs/performance.md, "Dense kernels laid out for decoding"). A product
by the transpose of a laid-out copy is what TensorFlow's graph optimizer turns into that
operand: inside a loop it cannot fold the transpose back onto the stored kernel.
"""

from keras import ops


def laid_out_kernels(dense_layers):
    """{name: the kernel of `dense_layers[name]` transposed to [units, inputs]}, or None if any
    of the layers holds quantized weights (its own call dequantizes them)."""
    if any(layer.quantization_mode is not None for layer in dense_layers.values()):
        return None
    return {name: ops.transpose(layer.kernel) for name, layer in dense_layers.items()}


def dense(layer, x, laid_out_kernel=None):
    """`layer(x)` for a Keras Dense `layer`; given `laid_out_kernel` (its kernel as
    `laid_out_kernels` copies it), the same product, bias and activation by that copy."""
    if laid_out_kernel is None:
        return layer(x)
    y = ops.matmul(x, ops.transpose(laid_out_kernel))
    if layer.bias is not None:
        y = y + layer.bias
    return y if layer.activation is None else layer.activation(y)
