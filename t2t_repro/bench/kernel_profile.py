"""Where a device's time goes in a few traced steps: its kernels' time summed by kind.

`bench train --backend=jax --profile_dir DIR` traces our training step with `jax.profiler`
(the trace opens in TensorBoard's profile plugin and in Perfetto) and prints, per step, the
first device's kernel time by kind (matmuls, scatters, reductions, XLA's pads before matmuls,
transposes, copies, the rest) and how long the device idled between kernels. On an H200 this
found the shared embedding's gradient summed as a bfloat16 scatter-add, 13.6 ms of a 70 ms
transformer_base step (docs/jax_and_gpus.md). XLA's CPU backend runs its operations on host
threads, so a CPU trace has no device kernels to sum.
"""

import collections
import glob
import gzip
import json
import os
import typing

# A kernel's kind is the first here whose markers its name contains (lower-cased).
KIND_MARKERS = (
    ("matmul", ("gemm", "nvjet", "cutlass", "xmma", "cublas")),
    ("attention (cuDNN)", ("fmha", "cudnn")),
    ("scatter", ("scatter",)),
    ("reduce", ("reduce",)),
    ("pad", ("pad",)),
    ("transpose", ("transpose",)),
    ("copy", ("memcpy", "memset", "copy")),
)
OTHER = "other"


def kernel_kind(name):
    """The kind of the kernel called `name` (an XLA fusion's or a library kernel's name)."""
    lowered = name.lower()
    return next((kind for kind, markers in KIND_MARKERS
                 if any(marker in lowered for marker in markers)), OTHER)


class DeviceTime(typing.NamedTuple):
    """Milliseconds per step on one device: `by_kind` {kind: kernel time} and `span` (first
    kernel's start to last kernel's end)."""
    device: str
    by_kind: dict
    span: float

    @property
    def kernels(self):
        """All kernels' time."""
        return sum(self.by_kind.values())

    @property
    def idle(self):
        """The span less the kernels: time with no kernel running where, as in a jitted step,
        one stream runs them all."""
        return self.span - self.kernels


def trace_steps(step, steps, directory):
    """Runs `step()` `steps` times under `jax.profiler`, writing the trace under `directory`;
    returns the path of its Perfetto trace (JSON)."""
    import jax

    with jax.profiler.trace(directory, create_perfetto_trace=True):
        for _ in range(steps):
            step()
    return max(glob.glob(os.path.join(directory, "**", "perfetto_trace.json.gz"),
                         recursive=True), key=os.path.getmtime)


def device_time(trace_path, steps):
    """`DeviceTime` of the first device (by name) in the Perfetto trace at `trace_path`, divided
    over `steps`; None when the trace has no device kernels."""
    with gzip.open(trace_path, "rt") as trace:
        events = json.load(trace)
    events = events["traceEvents"] if isinstance(events, dict) else events
    processes = {event["pid"]: event["args"]["name"] for event in events
                 if event.get("ph") == "M" and event.get("name") == "process_name"}
    devices = sorted(name for name in processes.values() if name.startswith("/device:"))
    if not devices:
        return None
    kernels = [event for event in events if event.get("ph") == "X"
               and processes.get(event["pid"]) == devices[0]]
    if not kernels:
        return None
    by_kind = collections.Counter()
    for kernel in kernels:
        by_kind[kernel_kind(kernel["name"])] += kernel["dur"] / 1e3 / steps
    span = (max(k["ts"] + k["dur"] for k in kernels) - min(k["ts"] for k in kernels)) / 1e3
    return DeviceTime(devices[0], dict(by_kind), span / steps)


def format_device_time(label, timed):
    """One line: `label`, the span, the kernels by kind (largest first) and the idle time."""
    if timed is None:
        return f"{label}: no device kernels in the trace (on a CPU, XLA runs on host threads)"
    kinds = ", ".join(f"{kind} {ms:.2f}" for kind, ms in
                      sorted(timed.by_kind.items(), key=lambda item: -item[1]))
    return (f"{label}: {timed.device}, ms a step: span {timed.span:.2f}, kernels "
            f"{timed.kernels:.2f} ({kinds}), idle {timed.idle:.2f}")
