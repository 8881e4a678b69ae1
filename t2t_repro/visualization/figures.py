"""The figures `python -m t2t_repro.visualize` draws: every head of one attention layer as
heatmaps labelled with the tokens (the paper's Figures 3-5), the positional encoding, and the
learning-rate schedule. Each function returns a matplotlib figure of a size fixed by its
content (`heads_figure_size`), so a PNG's pixel size is known before it is drawn."""

import math

import numpy as np

from t2t_repro.utils import plotting

DPI = 100
GRID_COLUMNS = 4
# A head's heatmap: this many inches per token, at least MIN_PANEL; room for tick labels.
INCHES_PER_TOKEN = 0.16
MIN_PANEL_INCHES = 1.8
LABEL_INCHES = 0.9
TITLE_INCHES = 0.5


def heads_figure_size(heads, rows, columns):
    """(width, height) in inches of `heads_figure` for `heads` heatmaps of rows × columns."""
    grid_columns = min(heads, GRID_COLUMNS)
    grid_rows = math.ceil(heads / GRID_COLUMNS)
    panel_width = max(MIN_PANEL_INCHES, INCHES_PER_TOKEN * columns) + LABEL_INCHES
    panel_height = max(MIN_PANEL_INCHES, INCHES_PER_TOKEN * rows) + LABEL_INCHES
    return grid_columns * panel_width, grid_rows * panel_height + TITLE_INCHES


def heads_figure(weights, row_labels, column_labels, title):
    """One heatmap per head of `weights` [heads, rows, columns] (each row a query's weights
    over the keys, summing to 1), rows and columns labelled with their tokens."""
    plt = plotting.pyplot()
    heads, rows, columns = weights.shape
    width, height = heads_figure_size(heads, rows, columns)
    grid_rows = math.ceil(heads / GRID_COLUMNS)
    # Constrained layout fits the tick labels inside the fixed figure size.
    figure, axes = plt.subplots(grid_rows, min(heads, GRID_COLUMNS), figsize=(width, height),
                                squeeze=False, layout="constrained")
    font = max(4.0, min(8.0, 160 / max(rows, columns)))
    for head, panel in enumerate(axes.flat):
        if head >= heads:
            panel.axis("off")
            continue
        panel.imshow(weights[head], cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto",
                     interpolation="nearest")
        panel.set_title(f"head {head}", fontsize=9)
        panel.set_xticks(range(columns), column_labels, rotation=90, fontsize=font)
        panel.set_yticks(range(rows), row_labels, fontsize=font)
        panel.tick_params(length=0)
    figure.suptitle(title, fontsize=11)
    return figure


def positions_figure(table, title):
    """The positional encoding `table` [positions, d_model] as a position × dimension map."""
    plt = plotting.pyplot()
    figure, axes = plt.subplots(figsize=(8.0, 4.5), layout="constrained")
    image = axes.imshow(table, cmap="RdBu", vmin=-1.0, vmax=1.0, aspect="auto",
                        interpolation="nearest")
    axes.set_xlabel("dimension i")
    axes.set_ylabel("position")
    axes.set_title(title, fontsize=10)
    figure.colorbar(image, ax=axes)
    return figure


def learning_rate_figure(steps, rates, warmup_steps, title):
    """The learning rate at each training step, with the end of warmup marked."""
    plt = plotting.pyplot()
    figure, axes = plt.subplots(figsize=(6.4, 4.0), layout="constrained")
    axes.plot(steps, rates)
    peak = int(np.argmax(rates))
    axes.axvline(warmup_steps, linestyle="--", color="grey", linewidth=1,
                 label=f"warmup_steps = {warmup_steps}")
    axes.annotate(f"peak {rates[peak]:.2e} at step {steps[peak]}", (steps[peak], rates[peak]),
                  textcoords="offset points", xytext=(10, -4), fontsize=8)
    axes.set_xlabel("training step")
    axes.set_ylabel("learning rate")
    axes.set_title(title, fontsize=10)
    axes.legend(fontsize=8)
    axes.grid(True, alpha=0.3)
    return figure
