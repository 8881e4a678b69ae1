"""Table 3's parameter counts: every row built as a Keras model, beside the paper's column.

    python -m t2t_repro.paper table3 [--vocab_size N] [--format text|json] [--rows SET,SET]

Builds the Keras model of every row of Table 3 (Vaswani et al., 2017) from its registered
hparams set, with one vocabulary of N tokens shared by the source embedding, the target
embedding and the pre-softmax projection, counts its weights with `count_params()` and sets the
count beside the paper's "params ×10⁶" column, with the relative difference and whether it is
within 5%. Rows the paper gives no count for (A, D, E) are listed with a null paper value.

Default vocabulary size, 40,000. The paper says only "about 37,000" shared BPE tokens for
EN-DE, and the parameter column does not fit that exactly: at 37,000 the 2-layer row (C, N=2)
comes out 6.5% below its 36M. The rows do not agree on one size either: "big" rounds to its
213M only for 35.4k-36.3k tokens, all ten others to theirs only for 41.0k-41.2k. So the
default is computed from the column itself: 40,149 is the vocabulary size that minimises the
largest relative difference over the eleven rows with a published count (2.1%, reached by C N=2
below and big above), rounded to the nearest thousand. At 40,000 every published row is within
2.3%. `--vocab_size 37000` shows the paper's nominal figure.

The models are built from their shapes with their weights' shapes only (never allocated or
initialised) and nothing is computed: all twenty rows take 9 s on a 2-core Zen 5 with a peak
memory of 0.7 GiB, about what importing TensorFlow takes (18 s and 1.7 GiB with initialised
weights, 2026-11-27); `--rows` builds only the named hparams sets.
"""

import argparse
import collections
import json
import sys

DEFAULT_VOCAB_SIZE = 40000
DEFAULT_VOCAB_SIZE_REASON = (
    "chosen from the table itself: 40,149 minimises the largest relative "
    "difference over the rows with a published count, rounded to the nearest thousand "
    "(the paper's ~37,000 would leave C N=2 6.5% low)"
)
TOLERANCE = 0.05

PaperRow = collections.namedtuple("PaperRow", ["name", "hparams_set", "change", "paper_millions"])

# Table 3 of the paper: rows in its order, the change from base as printed, and its
# "params ×10⁶" column (None where the paper prints no count).
TABLE3 = (
    PaperRow("base", "transformer_base", "N=6, d_model=512, d_ff=2048, h=8, d_k=d_v=64", 65),
    PaperRow("A h=1", "transformer_table3_a_h1", "h=1, d_k=d_v=512", None),
    PaperRow("A h=4", "transformer_table3_a_h4", "h=4, d_k=d_v=128", None),
    PaperRow("A h=16", "transformer_table3_a_h16", "h=16, d_k=d_v=32", None),
    PaperRow("A h=32", "transformer_table3_a_h32", "h=32, d_k=d_v=16", None),
    PaperRow("B dk=16", "transformer_table3_b_dk16", "d_k=16", 58),
    PaperRow("B dk=32", "transformer_table3_b_dk32", "d_k=32", 60),
    PaperRow("C N=2", "transformer_table3_c_n2", "N=2", 36),
    PaperRow("C N=4", "transformer_table3_c_n4", "N=4", 50),
    PaperRow("C N=8", "transformer_table3_c_n8", "N=8", 80),
    PaperRow("C d=256", "transformer_table3_c_d256", "d_model=256, d_k=d_v=32", 28),
    PaperRow("C d=1024", "transformer_table3_c_d1024", "d_model=1024, d_k=d_v=128", 168),
    PaperRow("C ff=1024", "transformer_table3_c_ff1024", "d_ff=1024", 53),
    PaperRow("C ff=4096", "transformer_table3_c_ff4096", "d_ff=4096", 90),
    PaperRow("D drop=0.0", "transformer_table3_d_drop0", "P_drop=0.0", None),
    PaperRow("D drop=0.2", "transformer_table3_d_drop02", "P_drop=0.2", None),
    PaperRow("D ls=0.0", "transformer_table3_d_ls0", "ε_ls=0.0", None),
    PaperRow("D ls=0.2", "transformer_table3_d_ls02", "ε_ls=0.2", None),
    PaperRow("E", "transformer_table3_e_learned_pos", "learned positional embedding", None),
    PaperRow("big", "transformer_big", "d_model=1024, d_ff=4096, h=16, P_drop=0.3", 213),
)


def count_parameters(hparams_set, vocab_size):
    """Weights of the Transformer built from `hparams_set` with a shared `vocab_size` vocabulary."""
    # Imported here so that --help and bad arguments answer without loading a backend.
    import keras

    from t2t_repro.hparams import create_hparams
    from t2t_repro.models.transformer import Transformer

    # Built in a stateless scope that leaves the variables uninitialised: their shapes are all
    # a count needs, and the big rows would otherwise allocate and fill up to ~1 GB each.
    with keras.StatelessScope(initialize_variables=False):
        model = Transformer(create_hparams(hparams_set), vocab_size, vocab_size).build_weights()
    count = model.count_params()
    # Keras keeps a list of the uninitialised variables, to fill at the next stateless scope's
    # end; clearing the session drops it.
    del model
    keras.backend.clear_session()
    return count


def compare_row(row, params):
    """The JSON record of one row: our count beside the paper's."""
    record = {
        "name": row.name,
        "hparams_set": row.hparams_set,
        "change": row.change,
        "params": params,
        "params_millions": round(params / 1e6, 3),
        "paper_millions": row.paper_millions,
        "relative_difference": None,
        "within_5_percent": None,
    }
    if row.paper_millions is not None:
        difference = params / (row.paper_millions * 1e6) - 1.0
        record["relative_difference"] = round(difference, 4)
        record["within_5_percent"] = abs(difference) <= TOLERANCE
    return record


def table3(vocab_size, rows=TABLE3):
    """Builds and counts every row; returns the report as a JSON-ready dict."""
    return {
        "vocab_size": vocab_size,
        "vocab_size_note": (
            "the default, " + DEFAULT_VOCAB_SIZE_REASON
            if vocab_size == DEFAULT_VOCAB_SIZE
            else f"set with --vocab_size (default {DEFAULT_VOCAB_SIZE})"
        ),
        "rows": [compare_row(row, _count_with_progress(row, vocab_size)) for row in rows],
    }


def _count_with_progress(row, vocab_size):
    # Building every row takes seconds (module docstring); say what is happening.
    if sys.stderr.isatty():
        print(f"building {row.hparams_set} ...", file=sys.stderr, flush=True)
    return count_parameters(row.hparams_set, vocab_size)


def format_text(report):
    header = ("row", "hparams set", "change", "params", "millions", "paper", "difference",
              "within 5%")
    lines = [header]
    for record in report["rows"]:
        published = record["paper_millions"] is not None
        lines.append(
            (
                record["name"],
                record["hparams_set"],
                record["change"],
                f"{record['params']:,}",
                f"{record['params_millions']:.1f}",
                f"{record['paper_millions']}" if published else "—",
                f"{record['relative_difference']:+.1%}" if published else "—",
                ("yes" if record["within_5_percent"] else "NO") if published else "—",
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    right_aligned = {3, 4, 5, 6}

    def render(line):
        cells = [
            cell.rjust(width) if i in right_aligned else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(line, widths))
        ]
        return "  ".join(cells).rstrip()

    published = [r for r in report["rows"] if r["paper_millions"] is not None]
    within = sum(r["within_5_percent"] for r in published)
    worst = max(published, key=lambda r: abs(r["relative_difference"]), default=None)
    text = [
        "Table 3 (Vaswani et al., 2017): parameters of the built Keras models vs the paper",
        f"Vocabulary: {report['vocab_size']} tokens, one matrix shared by the source and target "
        f"embeddings and the pre-softmax projection.",
        f"Vocabulary size: {report['vocab_size_note']}.",
        "",
        render(lines[0]),
        render(tuple("-" * width for width in widths)),
        *(render(line) for line in lines[1:]),
        "",
    ]
    if worst is not None:
        text.append(
            f"{within} of {len(published)} published counts within 5%; largest difference "
            f"{worst['relative_difference']:+.1%} ({worst['name']})."
        )
    return "\n".join(text)


def _table3_rows(text):
    by_set = {row.hparams_set: row for row in TABLE3}
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in by_set]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown Table 3 hparams set(s) {', '.join(unknown) or '(none given)'}; "
            f"choose from {', '.join(by_set)}"
        )
    return tuple(row for row in TABLE3 if row.hparams_set in names)


def add_arguments(parser):
    from t2t_repro.tables.arguments import positive_int

    parser.add_argument(
        "--vocab_size",
        type=positive_int,
        default=DEFAULT_VOCAB_SIZE,
        # argparse %-formats help strings; the reason contains a literal "%".
        help=f"shared vocabulary size (default {DEFAULT_VOCAB_SIZE}: "
        f"{DEFAULT_VOCAB_SIZE_REASON})".replace("%", "%%"),
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument(
        "--rows",
        type=_table3_rows,
        default=TABLE3,
        help="comma-separated hparams sets of the rows to build (default: every row)",
    )


def run(args):
    """`paper table3`: builds, counts and prints."""
    report = table3(args.vocab_size, args.rows)
    if args.format == "json":
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        print(format_text(report))
    return 0
