"""The table every benchmark prints: figure, unit, peer figure, ratio, and the machine."""

import os
import platform


def machine_description():
    """CPU model and core count (what the figures depend on), e.g. `2 cores, Intel Xeon ...`."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        model = names[0] if names else model
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {model}"


def format_table(rows, title):
    """`rows`: (what, figure, unit, peer name or '', peer figure or None) tuples, optionally
    followed by (peak resident bytes, the peer's peak resident bytes or None): then the table
    has their columns too, in GiB."""
    with_memory = any(len(row) > 5 for row in rows)
    header = ("measure", "figure", "unit", "peer", "peer figure", "ratio")
    if with_memory:
        header += ("peak memory", "peer peak memory")
    lines = [header]
    for what, figure, unit, peer, peer_figure, *memory in rows:
        ratio = f"{figure / peer_figure:.2f}x" if peer_figure else ""
        line = (what, _number(figure), unit, peer, _number(peer_figure), ratio)
        if with_memory:
            line += tuple(_gibibytes(peak) for peak in (memory or [None, None]))
        lines.append(line)
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    text = [title, f"machine: {machine_description()}"]
    text += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
             for row in lines]
    return "\n".join(text)


def _gibibytes(size):
    return "" if size is None else f"{size / 2**30:.2f} GiB"


def _number(value):
    if value is None:
        return ""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"
