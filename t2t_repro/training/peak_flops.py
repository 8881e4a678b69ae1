"""Peak dense TFLOPS of common accelerators, for model FLOPs utilisation.

Figures are the vendors' datasheet numbers for dense (not sparse) matmuls: "float32" is the
plain FP32 rate (TensorFlow and JAX may use TF32 tensor cores for float32 matmuls on Ampere
and later, which can exceed it), "bfloat16"/"float16" the tensor-core rate. Sources: NVIDIA
datasheets for H100 SXM and H200 (989 TFLOPS 16-bit dense, 67 FP32), A100 SXM (312, 19.5),
V100 SXM2 (125 tensor, 15.7), P100 SXM2 (21.2 FP16, 10.6), L4 (121, 30.3), A10 (125, 31.2),
T4 (65, 8.1). PCIe variants run lower clocks; pass --peak_tflops for them and for CPUs.
"""

import re

# (pattern in the device name as TensorFlow or JAX reports it, {dtype: TFLOPS}); the first match
# wins, so "A100" is tried before "A10".
_PEAKS = (
    (r"H100", {"float32": 67.0, "bfloat16": 989.0, "float16": 989.0}),
    (r"H200", {"float32": 67.0, "bfloat16": 989.0, "float16": 989.0}),
    (r"A100", {"float32": 19.5, "bfloat16": 312.0, "float16": 312.0}),
    (r"V100", {"float32": 15.7, "float16": 125.0}),
    (r"P100", {"float32": 10.6, "float16": 21.2}),
    (r"\bL4\b", {"float32": 30.3, "bfloat16": 121.0, "float16": 121.0}),
    (r"\bA10\b", {"float32": 31.2, "bfloat16": 125.0, "float16": 125.0}),
    (r"\bT4\b", {"float32": 8.1, "float16": 65.0}),
)


def compute_dtype(dtype_policy):
    """The matmul dtype of a Keras dtype policy name: mixed_bfloat16 -> bfloat16."""
    return dtype_policy.removeprefix("mixed_")


def peak_tflops(device_name, dtype):
    """Peak dense TFLOPS of one device named `device_name` at `dtype`, or None if unknown."""
    for pattern, peaks in _PEAKS:
        if re.search(pattern, device_name):
            return peaks.get(dtype)
    return None


def model_flops_utilization(flops_per_second, total_peak_tflops):
    """The fraction of the devices' summed peak that the model's FLOPs per second reach."""
    return flops_per_second / (total_peak_tflops * 1e12)
