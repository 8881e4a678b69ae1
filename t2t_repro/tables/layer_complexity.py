"""Table 1 of the paper, measured: how one layer's time and memory grow with the length n.

    python -m t2t_repro.paper table1 [--lengths 16,32,...,2048] [--hidden_size 512]
        [--window 64] [--kernel_size 3] [--repeats 15] [--fit_from 512] [--plot FILE.png]
        [--format text|json]

Four layers of width d (`--hidden_size`), each on one sequence of n positions (batch 1,
float32, a TensorFlow graph on this machine's CPU, the forward pass):
- self-attention: this package's `MultiHeadAttention`, 8 heads of d/8 (the paper's h);
- restricted self-attention: the same with window r (`--window`): each position attends to the
  positions fewer than r away, computed block by block (`layers.restricted_attention`);
- recurrent: `keras.layers.LSTM` with d units, returning all n outputs;
- convolutional: `keras.layers.Conv1D` with d filters of width k (`--kernel_size`).
Time: the median of `--repeats` calls after one untimed call (tracing). Memory: TensorFlow's
peak allocation on the CPU during one call above what was allocated before it
(`tf.config.experimental.get_memory_info`): activations and temporaries, not the weights.

Growth exponent: the least-squares slope of log(time) (or log(memory)) against log(n) over the
lengths >= `--fit_from` (below it, a call's fixed overhead hides the layer's work). Beside it,
the same fit to the layer's matmul FLOPs at those lengths (`layer_flops`): what the exponent
should be at these sizes. The paper's column is the asymptote: self-attention's projections
(8·n·d² FLOPs) outweigh its n² part (4·n²·d) until n passes 2·d, so at n <= 2048 with d = 512
its exponent lies between 1 and 2.
"""

import json
import os
import statistics
import sys
import time

import numpy as np

NAMES = ("self_attention", "restricted_self_attention", "recurrent", "convolutional")
DEFAULT_LENGTHS = (16, 32, 64, 128, 256, 512, 1024, 2048)
HEADS = 8

# The paper's Table 1 for each layer: (label, complexity per layer, sequential operations,
# maximum path length, the complexity's exponent in n).
PAPER = {
    "self_attention": ("Self-Attention", "O(n²·d)", "O(1)", "O(1)", 2),
    "restricted_self_attention": ("Self-Attention (restricted)", "O(r·n·d)", "O(1)", "O(n/r)", 1),
    "recurrent": ("Recurrent (LSTM)", "O(n·d²)", "O(n)", "O(n)", 1),
    "convolutional": ("Convolutional", "O(k·n·d²)", "O(1)", "O(log_k(n))", 1),
}


def fit_exponent(lengths, values):
    """p of values ≈ c·lengthᵖ: the least-squares slope of log(values) against log(lengths);
    None when a value is 0 (too small for TensorFlow's allocator statistics to see)."""
    if min(values) <= 0:
        return None
    slope, _ = np.polyfit(np.log(np.asarray(lengths, float)), np.log(np.asarray(values, float)),
                          1)
    return float(slope)


def layer_flops(name, length, hidden_size, window, kernel_size):
    """Matmul FLOPs (2 per multiply-add) of one forward call of layer `name` on `length`
    positions, as the layer computes them."""
    n, d = length, hidden_size
    projections = 4 * 2 * n * d * d  # W^Q, W^K, W^V, W^O
    if name == "self_attention":
        return projections + 2 * 2 * n * n * d  # QKᵀ and weights·V
    if name == "restricted_self_attention":
        # Blocks of r queries, each attending to its block and its two neighbours (3r keys).
        padded = -(-n // window) * window
        return projections + 2 * 2 * padded * 3 * window * d
    if name == "recurrent":
        return 2 * n * (d + d) * 4 * d  # four gates, from the input and the previous state
    if name == "convolutional":
        return 2 * n * kernel_size * d * d
    raise ValueError(f"unknown layer '{name}'; one of {NAMES}")


def build_layer(name, hidden_size, window, kernel_size):
    """The Keras layer `name` measures."""
    import keras

    from t2t_repro.layers import MultiHeadAttention

    head_size = hidden_size // HEADS
    return {
        "self_attention": lambda: MultiHeadAttention(HEADS, head_size),
        "restricted_self_attention": lambda: MultiHeadAttention(HEADS, head_size, window=window),
        "recurrent": lambda: keras.layers.LSTM(hidden_size, return_sequences=True),
        "convolutional": lambda: keras.layers.Conv1D(hidden_size, kernel_size, padding="same"),
    }[name]()


def measure(layer, length, hidden_size, repeats):
    """(median seconds, peak bytes) of `layer` on one random sequence of `length` positions."""
    import tensorflow as tf

    call = tf.function(lambda x: layer(x))
    x = tf.random.normal((1, length, hidden_size))
    call(x).numpy()  # traces, and builds the layer's weights
    seconds = []
    for _ in range(repeats):
        tf.config.experimental.reset_memory_stats("CPU:0")
        before = tf.config.experimental.get_memory_info("CPU:0")["current"]
        start = time.perf_counter()
        call(x).numpy()
        seconds.append(time.perf_counter() - start)
        peak = tf.config.experimental.get_memory_info("CPU:0")["peak"] - before
    return statistics.median(seconds), peak


def summarise(name, lengths, seconds, peak_bytes, hidden_size, window, kernel_size, fit_from):
    """The JSON record of one layer: its measurements, and their exponents beside the
    FLOP count's and the paper's."""
    label, complexity, sequential, path, paper_exponent = PAPER[name]
    fitted = [i for i, n in enumerate(lengths) if n >= fit_from]
    fit_lengths = [lengths[i] for i in fitted]
    flops = [layer_flops(name, n, hidden_size, window, kernel_size) for n in lengths]

    def exponent(values):
        slope = fit_exponent(fit_lengths, [values[i] for i in fitted])
        return None if slope is None else round(slope, 3)

    return {
        "name": name,
        "label": label,
        "paper_complexity": complexity,
        "paper_sequential_operations": sequential,
        "paper_maximum_path_length": path,
        "paper_exponent": paper_exponent,
        "seconds": list(seconds),
        "peak_bytes": list(peak_bytes),
        "flops": flops,
        "time_exponent": exponent(seconds),
        "memory_exponent": exponent(peak_bytes),
        "flops_exponent": exponent(flops),
    }


def table1(lengths=DEFAULT_LENGTHS, hidden_size=512, window=64, kernel_size=3, repeats=15,
           fit_from=512, names=NAMES):
    """Measures every layer of `names` at every length; returns the report as a JSON-ready
    dict."""
    if sum(n >= fit_from for n in lengths) < 2:
        raise ValueError(f"--fit_from={fit_from} leaves fewer than two of the lengths "
                         f"{list(lengths)} to fit; lower it or add longer lengths.")
    layers = []
    for name in names:
        layer = build_layer(name, hidden_size, window, kernel_size)
        measured = []
        for n in lengths:
            if sys.stderr.isatty():
                print(f"measuring {name} at n={n} ...", file=sys.stderr, flush=True)
            measured.append(measure(layer, n, hidden_size, repeats))
        seconds, peaks = zip(*measured)
        layers.append(summarise(name, list(lengths), seconds, peaks, hidden_size, window,
                                kernel_size, fit_from))
    return {
        "lengths": list(lengths),
        "hidden_size": hidden_size,
        "heads": HEADS,
        "window": window,
        "kernel_size": kernel_size,
        "repeats": repeats,
        "fit_from": fit_from,
        "fitted_lengths": [n for n in lengths if n >= fit_from],
        "layers": layers,
    }


def _render(rows, right_aligned=()):
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        cells = [cell.rjust(w) if i in right_aligned else cell.ljust(w)
                 for i, (cell, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def format_text(report):
    d, r, k = report["hidden_size"], report["window"], report["kernel_size"]
    summary = [("layer", "paper: complexity", "sequential", "path", "n-exponent",
                "FLOP count's", "time's", "memory's")]
    for layer in report["layers"]:
        summary.append((layer["label"], layer["paper_complexity"],
                        layer["paper_sequential_operations"], layer["paper_maximum_path_length"],
                        str(layer["paper_exponent"]), f"{layer['flops_exponent']:.2f}",
                        f"{layer['time_exponent']:.2f}",
                        "—" if layer["memory_exponent"] is None
                        else f"{layer['memory_exponent']:.2f}"))
    times = [("n", *(layer["label"] for layer in report["layers"]))]
    for i, n in enumerate(report["lengths"]):
        times.append((str(n), *(f"{layer['seconds'][i] * 1e3:.2f} ms, "
                                f"{layer['peak_bytes'][i] / 2**20:.1f} MiB"
                                for layer in report["layers"])))
    fitted = report["fitted_lengths"]
    return "\n".join([
        f"Table 1 (Vaswani et al., 2017) measured: one layer, d = {d}, {report['heads']} heads, "
        f"restricted window r = {r}, kernel k = {k}; batch 1, float32, forward pass, "
        f"median of {report['repeats']} calls",
        "",
        *_render(summary, right_aligned={4, 5, 6, 7}),
        "",
        f"Exponents: least-squares slope of log(value) against log(n) over n = "
        f"{', '.join(map(str, fitted))}. The paper's is the asymptote (n ≫ d for "
        f"self-attention); the FLOP count's is what these sizes should show.",
        "",
        "Time and peak memory (TensorFlow's CPU allocations above the inputs) per call:",
        *_render(times, right_aligned=set(range(len(times[0])))),
    ])


def plot(report, path):
    """Time per call against n on log-log axes, one line per layer, with n and n² guides over
    the fitted lengths."""
    from t2t_repro.utils import plotting

    plt = plotting.pyplot()
    figure, axes = plt.subplots(figsize=(6.4, 4.4))
    lengths = np.asarray(report["lengths"], float)
    for layer in report["layers"]:
        axes.plot(lengths, np.asarray(layer["seconds"]) * 1e3, marker="o",
                  label=f"{layer['label']}, {layer['paper_complexity']}: measured "
                        f"$n^{{{layer['time_exponent']:.2f}}}$")
    top = max(max(layer["seconds"]) for layer in report["layers"]) * 1e3
    fitted = np.asarray(report["fitted_lengths"], float)
    for power, style in ((1, ":"), (2, "--")):
        axes.plot(fitted, top * (fitted / fitted[-1]) ** power, style, color="grey",
                  linewidth=1, label=f"$\\propto n^{power}$")
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("sequence length n")
    axes.set_ylabel("time per call (ms)")
    axes.set_title(f"One layer, d = {report['hidden_size']}, r = {report['window']}, "
                   f"k = {report['kernel_size']} (CPU, forward)")
    axes.legend(fontsize=7)
    axes.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    return plotting.save(figure, path)


def add_arguments(parser):
    from t2t_repro.tables.arguments import positive_int, positive_ints

    parser.add_argument("--lengths", type=positive_ints, default=DEFAULT_LENGTHS,
                        help="comma-separated sequence lengths n (default %(default)s)")
    parser.add_argument("--hidden_size", type=positive_int, default=512,
                        help="d, a multiple of 8 (default %(default)s)")
    parser.add_argument("--window", type=positive_int, default=64,
                        help="r of restricted self-attention (default %(default)s)")
    parser.add_argument("--kernel_size", type=positive_int, default=3,
                        help="k of the convolution (default %(default)s)")
    parser.add_argument("--repeats", type=positive_int, default=15,
                        help="timed calls per layer and length; the median counts")
    parser.add_argument("--fit_from", type=positive_int, default=512,
                        help="fit exponents over the lengths >= this (default %(default)s)")
    parser.add_argument("--plot", metavar="FILE.png", help="also draw time against n")
    parser.add_argument("--format", choices=("text", "json"), default="text")


def check_plot_file(path):
    """Exits with one line unless `path` is a file the plot can be written to: a `.png` name in
    a folder that exists and can be written, and no checkpoint or other file than an earlier
    PNG (the plot would replace it)."""
    from t2t_repro.cli import output_paths
    from t2t_repro.errors import ConfigurationError
    from t2t_repro.training.attention_images import PNG_SIGNATURE

    try:
        output_paths.check_output_file(path, "--plot")
        output_paths.check_not_a_checkpoint(path, "--plot")
    except ConfigurationError as error:
        sys.exit(f"error: {error}")
    if not path.lower().endswith(".png"):
        sys.exit(f"error: --plot={path} must name a PNG file (FILE.png), which the plot is.")
    if os.path.isfile(path):
        with open(path, "rb") as f:
            if f.read(len(PNG_SIGNATURE)) != PNG_SIGNATURE:
                sys.exit(f"error: --plot={path} holds a file that is not a PNG, which the plot "
                         f"would replace; name another file.")


def run(args):
    """`paper table1`: measures, prints, and draws the plot when asked."""
    if args.hidden_size % HEADS:
        sys.exit(f"error: --hidden_size={args.hidden_size} must be a multiple of {HEADS} "
                 f"(the heads).")
    if args.plot:
        check_plot_file(args.plot)
    try:
        report = table1(args.lengths, args.hidden_size, args.window, args.kernel_size,
                        args.repeats, args.fit_from)
    except ValueError as error:
        sys.exit(f"error: {error}")
    print(json.dumps(report, indent=2, ensure_ascii=False) if args.format == "json"
          else format_text(report))
    if args.plot:
        print(f"wrote {plot(report, args.plot)}", file=sys.stderr)
    return 0
