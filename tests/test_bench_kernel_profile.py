"""`bench train --backend=jax --profile_dir`'s summary of a trace: kernel kinds of names seen
on an H200, per-step sums by kind and idle time worked by hand on a written trace, and a real
`jax.profiler` trace of jitted steps on this CPU, which has no device kernels."""

import gzip
import json

import numpy as np
import pytest

from t2t_repro.bench.kernel_profile import (device_time, format_device_time, kernel_kind,
                                            trace_steps)


@pytest.mark.parametrize("name, kind", [
    ("nvjet_sm90_tst_128x160_64x5_2x1_v_bz_TNT", "matmul"),
    ("gemm_fusion_dot_106", "matmul"),
    ("input_scatter_fusion_2", "scatter"),
    ("input_reduce_fusion_1", "reduce"),
    ("loop_pad_fusion_131", "pad"),
    ("loop_transpose_fusion_80", "transpose"),
    ("wrapped_transpose_10", "transpose"),
    ("MemcpyH2D", "copy"),
    ("__cudnn$fmha_forward", "attention (cuDNN)"),
    ("loop_compare_select_fusion", "other"),
])
def test_kernel_kinds_of_names_an_h200_trace_holds(name, kind):
    assert kernel_kind(name) == kind


def _complete(pid, name, start, duration):
    return {"ph": "X", "pid": pid, "tid": 7, "name": name, "ts": start, "dur": duration}


def test_device_time_sums_the_first_devices_kernels_by_kind_per_step(tmp_path):
    """Two steps on /device:GPU:0, in µs: matmul 0–100, scatter 100–140, pad 150–170, matmul
    200–300, add 300–320, copy 332–344. Per step, in ms: matmul 0.1, scatter 0.02, pad 0.01,
    other 0.01, copy 0.006 (kernels 0.146); span 344 µs / 2 = 0.172; idle (the gaps 10 + 30 +
    12 µs) / 2 = 0.026. The host's and the second GPU's events are not counted."""
    events = [{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}
              for pid, name in ((1, "/host:CPU"), (2, "/device:GPU:0"), (3, "/device:GPU:1"))]
    events += [_complete(2, name, start, duration) for name, start, duration in (
        ("nvjet_sm90_tst_128x160", 0, 100), ("input_scatter_fusion_2", 100, 40),
        ("loop_pad_fusion", 150, 20), ("nvjet_sm90_tss_128x128", 200, 100),
        ("loop_add_fusion", 300, 20), ("MemcpyD2H", 332, 12))]
    events += [_complete(1, "python", 0, 5000), _complete(3, "gemm_fusion_dot", 0, 900)]
    path = tmp_path / "perfetto_trace.json.gz"
    with gzip.open(path, "wt") as trace:
        json.dump({"traceEvents": events}, trace)

    timed = device_time(str(path), steps=2)
    assert timed.device == "/device:GPU:0"
    assert timed.by_kind == pytest.approx(
        {"matmul": 0.1, "scatter": 0.02, "pad": 0.01, "other": 0.01, "copy": 0.006})
    assert (timed.kernels, timed.span, timed.idle) == pytest.approx((0.146, 0.172, 0.026))
    line = format_device_time("transformer_base mixed_bfloat16", timed)
    assert line == ("transformer_base mixed_bfloat16: /device:GPU:0, ms a step: span 0.17, "
                    "kernels 0.15 (matmul 0.10, scatter 0.02, pad 0.01, other 0.01, "
                    "copy 0.01), idle 0.03")


def test_a_real_trace_of_jitted_steps_on_a_cpu_holds_no_device_kernels(tmp_path):
    jax = pytest.importorskip("jax")
    square = jax.jit(lambda x: x @ x)
    matrix = np.eye(64, dtype=np.float32)
    calls = []

    def step():
        calls.append(square(matrix).block_until_ready())

    trace = trace_steps(step, 2, str(tmp_path))
    assert len(calls) == 2 and trace.endswith("perfetto_trace.json.gz")
    assert device_time(trace, 2) is None


def test_a_device_without_kernels_in_the_trace_gives_none(tmp_path):
    path = tmp_path / "perfetto_trace.json.gz"
    with gzip.open(path, "wt") as trace:
        json.dump([{"ph": "M", "name": "process_name", "pid": 2,
                    "args": {"name": "/device:GPU:0"}}], trace)
    assert device_time(str(path), steps=1) is None
    assert "no device kernels" in format_device_time("tiny", None)
