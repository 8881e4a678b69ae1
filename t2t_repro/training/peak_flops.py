"""Peak dense TFLOPS of common accelerators, for model FLOPs utilisation (MFU).

The figures are NVIDIA's datasheet numbers for dense matmuls; where a datasheet prints only
the 2:4-sparse tensor-core figure (marked * there: H100, H200, L4), it is halved. Dtypes:
- "float32": IEEE FP32 on the CUDA cores;
- "tf32": float32 matmuls run on TF32 tensor cores, which TensorFlow and XLA (JAX) do by
  default on Ampere and later; on older GPUs, which have no TF32, the FP32 figure;
- "bfloat16", "float16": the tensor-core figure (FP32 accumulation), or FP16 without tensor
  cores (P100). None where the GPU has no such hardware (bfloat16 before Ampere).
Sources, NVIDIA's datasheets by title (TFLOPS):
- "Tesla P100" (PCIe and SXM2): FP32 10.6 SXM2 / 9.3 PCIe, FP16 21.2 / 18.7. The paper's own
  estimate (Table 2) used 9.5 TFLOPS "sustained single-precision" per P100.
- "Tesla V100": FP32 15.7 SXM2 / 14 PCIe; tensor 125 / 112. "Tesla V100S": 16.4, 130.
- "Tesla T4": FP32 8.1, mixed FP16/FP32 65.
- "A100 Tensor Core GPU": FP32 19.5, TF32 156, BF16/FP16 312 (SXM and PCIe alike).
- "A10 Tensor Core GPU": FP32 31.2, TF32 62.5, BF16/FP16 125.
- "L4 Tensor Core GPU": FP32 30.3, TF32 120*, BF16/FP16 242*.
- "H100 Tensor Core GPU": SXM FP32 67, TF32 989*, BF16/FP16 1979*; PCIe 51, 756*, 1513*;
  NVL 60, 835*, 1671*.
- "H200 Tensor Core GPU": SXM as H100 SXM; NVL as H100 NVL.
"""

import re

_DTYPES = ("float32", "tf32", "bfloat16", "float16")


def _peaks(float32, tf32, bfloat16, float16):
    return dict(zip(_DTYPES, (float32, tf32, bfloat16, float16)))


_H100_SXM = _peaks(67.0, 494.5, 989.5, 989.5)
_H100_NVL = _peaks(60.0, 417.5, 835.5, 835.5)

# (tokens that must all be in the device name, peaks): the name as CUDA reports it to
# TensorFlow (`get_device_details`) and JAX (`device_kind`), e.g. "NVIDIA A100-SXM4-40GB",
# split at spaces and hyphens and upper-cased. Tokens, not substrings, so that "A10" does not
# match "A100" or "A10G", nor "L4" "L40S". The first match wins. A form factor the table does
# not know (e.g. "Tesla V100-FHHL") matches nothing: the user passes --peak_tflops.
_TABLE = (
    ({"H200", "NVL"}, _H100_NVL),
    ({"H200"}, _H100_SXM),
    ({"H100", "PCIE"}, _peaks(51.0, 378.0, 756.5, 756.5)),
    ({"H100", "NVL"}, _H100_NVL),
    ({"H100", "HBM3"}, _H100_SXM),  # the SXM5 part reports "NVIDIA H100 80GB HBM3"
    ({"H100", "SXM5"}, _H100_SXM),
    ({"A100"}, _peaks(19.5, 156.0, 312.0, 312.0)),
    ({"A10"}, _peaks(31.2, 62.5, 125.0, 125.0)),
    ({"L4"}, _peaks(30.3, 60.0, 121.0, 121.0)),
    ({"T4"}, _peaks(8.1, 8.1, None, 65.0)),
    ({"V100S"}, _peaks(16.4, 16.4, None, 130.0)),
    ({"V100", "SXM2"}, _peaks(15.7, 15.7, None, 125.0)),
    ({"V100", "PCIE"}, _peaks(14.0, 14.0, None, 112.0)),
    ({"P100", "SXM2"}, _peaks(10.6, 10.6, None, 21.2)),
    ({"P100", "PCIE"}, _peaks(9.3, 9.3, None, 18.7)),
)


def compute_dtype(dtype_policy, tensor_float_32=False):
    """The matmul dtype of a Keras dtype policy name, a key of `peak_tflops`: mixed_bfloat16
    -> bfloat16; float32 -> float32, or tf32 when TF32 execution is on (TensorFlow's
    `tf.config.experimental.tensor_float_32_execution_enabled()`, on by default)."""
    dtype = dtype_policy.removeprefix("mixed_")
    if dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"No matmul dtype for dtype policy '{dtype_policy}': expected "
                         f"float32, mixed_bfloat16 or mixed_float16.")
    return "tf32" if dtype == "float32" and tensor_float_32 else dtype


def peak_tflops(device_name, dtype):
    """Peak dense TFLOPS of one device named `device_name` (as TensorFlow or JAX reports it)
    at `dtype` (one of "float32", "tf32", "bfloat16", "float16"); None for a device not in the
    table (CPUs included) or a dtype it has no hardware for."""
    if dtype not in _DTYPES:
        raise ValueError(f"Unknown dtype '{dtype}' for peak TFLOPS: expected one of {_DTYPES}.")
    tokens = set(re.split(r"[\s\-_]+", device_name.upper()))
    for required, peaks in _TABLE:
        if required <= tokens:
            return peaks[dtype]
    return None


def model_flops_utilization(flops_per_second, total_peak_tflops):
    """The fraction of the devices' summed peak (TFLOPS) that the model's FLOPs per second
    reach."""
    if not total_peak_tflops or total_peak_tflops <= 0:
        raise ValueError(f"Peak TFLOPS must be positive, got {total_peak_tflops}: pass the "
                         f"device's peak with --peak_tflops.")
    return flops_per_second / (total_peak_tflops * 1e12)
