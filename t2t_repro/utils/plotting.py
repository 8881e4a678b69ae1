"""matplotlib, headless: every figure this package draws is written to a PNG file, never shown,
so the Agg backend is chosen before pyplot is imported (no display is needed or used)."""


def pyplot():
    """matplotlib.pyplot on the Agg backend (imported on first use: plotting is optional work
    for the commands that draw)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(figure, path, dpi=100):
    """Writes `figure` as a PNG at `path` and frees it; returns `path`."""
    plt = pyplot()
    figure.savefig(path, dpi=dpi, format="png")
    plt.close(figure)
    return path
