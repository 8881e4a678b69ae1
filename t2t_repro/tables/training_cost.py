"""Table 2's training cost, counted from the model beside the paper's estimate.

    python -m t2t_repro.paper table2 [--vocab_size 37000] [--length 25]
        [--tokens_per_step 25000] [--format text|json]

The paper's "Training Cost (FLOPs)" column (base 3.3·10^18, big 2.3·10^19) is an estimate from
hardware: training time × number of GPUs × an estimate of one GPU's sustained single-precision
TFLOPS (its footnote: K80 2.8, K40 3.7, M40 6.0, P100 9.5); base trained 12 hours and big 3.5
days on 8 P100s, and 12 h × 8 × 9.5 TFLOPS = 3.3·10^18. Here the FLOPs are counted instead:
the model's matmuls per target token (`models/flops.py`; the backward pass costs twice the
forward), layer by layer, for sentence pairs of `--length` source and target tokens with the
paper's shared 37,000-token EN-DE vocabulary, times the paper's steps (100k base, 300k big) and
batch (about 25,000 target tokens per step, and as many source tokens).

The count is smaller: the estimate counts every second of every GPU as work at 9.5 TFLOPS, so
it also holds what the model's arithmetic does not need (padding in the batches, softmaxes,
layer norms, dropout, the loss, Adam, input, the GPUs' communication) and whatever rate the
GPUs really sustained. Counted ÷ estimate is the share of the assumed 9.5 TFLOPS the model's
own matmuls used (model FLOPs utilisation, if the GPUs sustained exactly that).
"""

import dataclasses
import json

from t2t_repro.models import flops

# Footnote 5 of the paper: sustained single-precision TFLOPS it assumed per GPU.
PAPER_TFLOPS = {"K80": 2.8, "K40": 3.7, "M40": 6.0, "P100": 9.5}


@dataclasses.dataclass(frozen=True)
class PaperRun:
    """One Table 2 row's training run as the paper describes it (§5.2, Table 2)."""

    label: str
    hparams_set: str
    steps: int
    hours: float
    gpus: int
    gpu: str
    paper_flops: float

    def estimate(self):
        """The paper's method: hours × GPUs × the GPU's sustained TFLOPS."""
        return self.hours * 3600 * self.gpus * PAPER_TFLOPS[self.gpu] * 1e12


PAPER_RUNS = (
    PaperRun("base", "transformer_base", 100_000, 12, 8, "P100", 3.3e18),
    PaperRun("big", "transformer_big", 300_000, 3.5 * 24, 8, "P100", 2.3e19),
)


def per_target_token(hparams, vocab_size, length):
    """(parts, total) for pairs of `length` source and `length` target tokens: parts is
    {part: {"layers", "forward", "backward"}}, one layer's FLOPs per target token forward and
    backward; total is the training FLOPs (forward and backward, every layer) of one target
    token."""
    encoder_layers, decoder_layers = flops.layer_counts(hparams)
    layers = {"encoder_attention": encoder_layers, "encoder_ffn": encoder_layers,
              "decoder_self_attention": decoder_layers,
              "decoder_encoder_attention": decoder_layers, "decoder_ffn": decoder_layers,
              "logits": 1}
    forward = flops.flops_by_part(hparams, vocab_size, length, length)
    parts = {}
    for part in flops.PARTS:
        one_layer = forward[part] / layers[part] / length
        parts[part] = {"layers": layers[part], "forward": one_layer, "backward": 2 * one_layer}
    total = flops.training_flops(hparams, vocab_size).of_lengths(length, length) / length
    return parts, total


def training_cost(run, hparams, vocab_size=37000, length=25, tokens_per_step=25000):
    """The JSON record of `run` with the model of `hparams`: FLOPs counted per target token
    and for the whole run, beside the paper's figure and its estimate."""
    parts, per_token = per_target_token(hparams, vocab_size, length)
    counted = per_token * tokens_per_step * run.steps
    seconds = run.hours * 3600
    return {
        "model": run.label,
        "hparams_set": run.hparams_set,
        "parts_per_target_token": parts,
        "training_flops_per_target_token": per_token,
        "steps": run.steps,
        "target_tokens_per_step": tokens_per_step,
        "counted_flops": counted,
        "paper_flops": run.paper_flops,
        "paper_estimate": {"hours": run.hours, "gpus": run.gpus, "gpu": run.gpu,
                           "tflops_per_gpu": PAPER_TFLOPS[run.gpu], "flops": run.estimate()},
        "counted_over_paper": counted / run.paper_flops,
        "counted_tflops_per_gpu": counted / seconds / run.gpus / 1e12,
        # How much the sentence length moves the count (attention's pairs grow with it).
        "counted_flops_at_half_and_double_length": [
            per_target_token(hparams, vocab_size, max(1, length // 2))[1] * tokens_per_step
            * run.steps,
            per_target_token(hparams, vocab_size, 2 * length)[1] * tokens_per_step * run.steps],
    }


def table2(vocab_size=37000, length=25, tokens_per_step=25000, runs=PAPER_RUNS):
    """Every run of `runs` with its registered hparams set; the report as a JSON-ready dict."""
    from t2t_repro.hparams import create_hparams

    return {"vocab_size": vocab_size, "length": length, "tokens_per_step": tokens_per_step,
            "models": [training_cost(run, create_hparams(run.hparams_set), vocab_size, length,
                                     tokens_per_step) for run in runs]}


PART_LABELS = {
    "encoder_attention": "encoder self-attention",
    "encoder_ffn": "encoder feed-forward",
    "decoder_self_attention": "decoder self-attention",
    "decoder_encoder_attention": "encoder-decoder attention",
    "decoder_ffn": "decoder feed-forward",
    "logits": "pre-softmax projection",
}


def _render(rows):
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join([row[0].ljust(widths[0])]
                               + [cell.rjust(w) for cell, w in zip(row[1:], widths[1:])]))
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def format_text(report):
    models = report["models"]
    by_layer = [("per target token, MFLOP", "layers", *(
        f"{model['model']} {pass_}/layer" for model in models for pass_ in ("fwd", "bwd")),
        *(f"{model['model']} training" for model in models))]
    for part, label in PART_LABELS.items():
        cells = [label, "/".join(str(m["parts_per_target_token"][part]["layers"])
                                 for m in models)]
        for model in models:
            one = model["parts_per_target_token"][part]
            cells += [f"{one['forward'] / 1e6:.2f}", f"{one['backward'] / 1e6:.2f}"]
        for model in models:
            one = model["parts_per_target_token"][part]
            cells.append(f"{3 * one['forward'] * one['layers'] / 1e6:.1f}")
        by_layer.append(tuple(cells))
    by_layer.append(("total", "", *([""] * 2 * len(models)), *(
        f"{model['training_flops_per_target_token'] / 1e6:.1f}" for model in models)))

    runs = [("model", "steps", "target tokens", "counted FLOPs", "paper", "paper's estimate",
             "counted/paper", "counted TFLOPS per GPU")]
    for model in models:
        estimate = model["paper_estimate"]
        runs.append((
            model["model"], f"{model['steps']:,}",
            f"{model['steps'] * model['target_tokens_per_step']:.2e}",
            f"{model['counted_flops']:.2e}", f"{model['paper_flops']:.1e}",
            f"{estimate['hours']:g} h × {estimate['gpus']} {estimate['gpu']} × "
            f"{estimate['tflops_per_gpu']} TFLOPS = {estimate['flops']:.2e}",
            f"{model['counted_over_paper']:.2f}", f"{model['counted_tflops_per_gpu']:.2f}",
        ))
    half, double = report["length"] // 2, 2 * report["length"]
    sensitivity = "; ".join(
        f"{model['model']} {low:.2e} / {high:.2e}"
        for model in models
        for low, high in [model["counted_flops_at_half_and_double_length"]])
    return "\n".join([
        "Table 2 (Vaswani et al., 2017), training cost: FLOPs counted from the model beside "
        "the paper's estimate",
        f"Counted: matmul FLOPs per target token (backward = 2 × forward), pairs of "
        f"{report['length']} source + {report['length']} target tokens, a shared "
        f"{report['vocab_size']:,}-token vocabulary, {report['tokens_per_step']:,} target "
        f"tokens per step.",
        "",
        *_render(by_layer),
        "",
        *_render(runs),
        "",
        f"Pairs of {half} or {double} tokens instead of {report['length']}: {sensitivity}.",
        "The paper's figure is GPU time × GPUs × assumed sustained TFLOPS (P100: 9.5): every "
        "second of the run at that rate, including what the model's matmuls do not need "
        "(padding, softmaxes, norms, the optimizer, input, communication). counted/paper is "
        "the share of that rate the model's arithmetic used.",
    ])


def add_arguments(parser):
    from t2t_repro.tables.arguments import positive_int

    parser.add_argument("--vocab_size", type=positive_int, default=37000,
                        help="shared vocabulary (default %(default)s, the paper's EN-DE)")
    parser.add_argument("--length", type=positive_int, default=25,
                        help="source and target tokens per sentence pair (default %(default)s)")
    parser.add_argument("--tokens_per_step", type=positive_int, default=25000,
                        help="target tokens per training step (default %(default)s, the paper's)")
    parser.add_argument("--format", choices=("text", "json"), default="text")


def run(args):
    """`paper table2`: counts and prints."""
    report = table2(args.vocab_size, args.length, args.tokens_per_step)
    print(json.dumps(report, indent=2, ensure_ascii=False) if args.format == "json"
          else format_text(report))
    return 0
