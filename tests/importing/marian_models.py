"""Marian Transformers built here, for the import's tests and its documented examples (no
OPUS-MT release can be downloaded on these machines): random weights under Marian's exact
names and shapes, the options in `special:model.yml`, unigram SentencePiece models trained on
real text (as OPUS-MT's are) and Marian `.yml` vocabularies, laid out as an OPUS-MT release
folder (`decoder.yml`, the `.npz`, the vocabularies, `source.spm`, `target.spm`).

    python tests/importing/marian_models.py --output_dir=opus-mt-de-en \\
        --source_text=../shared/data/multi30k_ende/train.de \\
        --target_text=../shared/data/multi30k_ende/train.en

Marian's own position table (`marian_sinusoids`) is written beside the model for
CTranslate2 (`model.ctranslate2.npz`, the same weights plus `Wpos`): CTranslate2's converter
would otherwise build its sinusoids with the paper's spacing, not Marian's.
"""

import argparse
import dataclasses
import io
import os

import numpy as np
import sentencepiece
import yaml
from sentencepiece import sentencepiece_model_pb2


@dataclasses.dataclass(frozen=True)
class MarianOptions:
    """The architecture of a model to build, in Marian's terms."""

    pre_norm: bool = False
    # "all": one matrix for source, target and output (`Wemb`, one joint vocabulary);
    # "decoder": the decoder's embedding is the output's; "none": three matrices.
    tied: str = "all"
    activation: str = "swish"
    dim_emb: int = 32
    heads: int = 4
    dim_ffn: int = 64
    enc_depth: int = 2
    dec_depth: int = 1
    vocab_size: int = 400  # of each SentencePiece model
    seed: int = 0


def marian_sinusoids(positions, dim):
    """Marian's (and tensor2tensor's) timing signal: [sin | cos] over d/2 frequencies spaced
    by log(10⁴)/(d/2 − 1), written out here from Marian's description."""
    half = dim // 2
    frequencies = np.exp(-np.arange(half) * np.log(10000.0) / (half - 1))
    angles = np.arange(positions)[:, None] * frequencies[None, :]
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1).astype(np.float32)


def train_sentencepiece(lines, vocab_size):
    """A unigram SentencePiece model's bytes (OPUS-MT's kind: <unk> 0, <s> 1, </s> 2)."""
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size,
        model_type="unigram", minloglevel=2, num_threads=2)
    return model.getvalue()


def normal_pieces(model_bytes):
    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(model_bytes)
    return [piece.piece for piece in model.pieces
            if piece.type == sentencepiece_model_pb2.ModelProto.SentencePiece.NORMAL]


def write_vocabulary(path, pieces):
    """A Marian vocabulary: `</s>` 0, `<unk>` 1, then `pieces`, as YAML."""
    entries = {piece: i for i, piece in enumerate(["</s>", "<unk>", *pieces])}
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(entries, f, allow_unicode=True, sort_keys=False, width=1000)
    return len(entries)


def model_yml(options):
    """`special:model.yml` as Marian writes it for these options (the ones read on import and
    by CTranslate2's converter)."""
    return yaml.safe_dump({
        "type": "transformer", "dim-emb": options.dim_emb, "enc-depth": options.enc_depth,
        "dec-depth": options.dec_depth, "transformer-heads": options.heads,
        "transformer-dim-ffn": options.dim_ffn, "transformer-ffn-depth": 2,
        "transformer-ffn-activation": options.activation,
        "transformer-decoder-autoreg": "self-attention",
        "transformer-preprocess": "n" if options.pre_norm else "",
        "transformer-postprocess": "da" if options.pre_norm else "dan",
        "transformer-postprocess-top": "n" if options.pre_norm else "",
        "transformer-postprocess-emb": "d", "transformer-train-position-embeddings": False,
        "transformer-no-projection": False, "transformer-tied-layers": [],
        "transformer-guided-alignment-layer": "last", "right-left": False,
        "tied-embeddings": options.tied == "decoder", "tied-embeddings-all": options.tied == "all",
        "tied-embeddings-src": False, "transformer-dropout": 0.1, "label-smoothing": 0.1,
    }, sort_keys=False)


def marian_weights(options, source_size, target_size):
    """{Marian name: random array} of a Transformer with `options`."""
    rng = np.random.default_rng(options.seed)
    d, ffn = options.dim_emb, options.dim_ffn

    def normal(*shape, scale=None):
        return (rng.standard_normal(shape) * (scale or shape[0] ** -0.5)).astype(np.float32)

    weights = {}
    if options.tied == "all":
        weights["Wemb"] = normal(source_size, d, scale=0.3)
    else:
        weights["encoder_Wemb"] = normal(source_size, d, scale=0.3)
        weights["decoder_Wemb"] = normal(target_size, d, scale=0.3)
    if options.tied == "none":
        weights["decoder_ff_logit_out_W"] = normal(d, target_size, scale=0.3)
    bias = normal(1, target_size, scale=0.5)
    bias[0, 0] += 4.0  # </s> likelier, so that outputs end at many lengths
    weights["decoder_ff_logit_out_b"] = bias
    suffix = "_pre" if options.pre_norm else ""

    def norm(prefix):
        weights[f"{prefix}_ln_scale{suffix}"] = 1 + normal(1, d, scale=0.1)
        weights[f"{prefix}_ln_bias{suffix}"] = normal(1, d, scale=0.1)

    def attention(prefix):
        for name in "qkvo":
            weights[f"{prefix}_W{name}"] = normal(d, d)
            weights[f"{prefix}_b{name}"] = normal(1, d, scale=0.1)
        norm(f"{prefix}_Wo")

    def feed_forward(prefix):
        weights[f"{prefix}_W1"], weights[f"{prefix}_b1"] = normal(d, ffn), normal(1, ffn, scale=0.1)
        weights[f"{prefix}_W2"], weights[f"{prefix}_b2"] = normal(ffn, d), normal(1, d, scale=0.1)
        norm(f"{prefix}_ffn")

    for i in range(1, options.enc_depth + 1):
        attention(f"encoder_l{i}_self")
        feed_forward(f"encoder_l{i}_ffn")
    for i in range(1, options.dec_depth + 1):
        attention(f"decoder_l{i}_self")
        attention(f"decoder_l{i}_context")
        feed_forward(f"decoder_l{i}_ffn")
    if options.pre_norm:
        for stack in ("encoder", "decoder"):
            weights[f"{stack}_top_ln_scale"] = 1 + normal(1, d, scale=0.1)
            weights[f"{stack}_top_ln_bias"] = normal(1, d, scale=0.1)
    return weights


def config_entry(text):
    """`special:model.yml` as Marian stores it: the YAML's bytes and a NUL."""
    return np.frombuffer(text.encode("utf-8") + b"\0", dtype=np.int8)


def write_opus_mt_folder(folder, source_lines, target_lines, options=MarianOptions(),
                         config_text=None):
    """An OPUS-MT release folder of a random model with `options` (`config_text`: another
    `special:model.yml`), plus `model.ctranslate2.npz` for CTranslate2; returns the folder's
    file paths by role."""
    os.makedirs(folder, exist_ok=True)
    path = {name: os.path.join(folder, name) for name in (
        "decoder.yml", "model.npz", "model.ctranslate2.npz", "source.spm", "target.spm",
        "vocab.yml", "vocab.src.yml", "vocab.trg.yml")}
    source_spm = train_sentencepiece(source_lines, options.vocab_size)
    target_spm = train_sentencepiece(target_lines, options.vocab_size)
    for name, model in (("source.spm", source_spm), ("target.spm", target_spm)):
        with open(path[name], "wb") as f:
            f.write(model)
    if options.tied == "all":  # one joint vocabulary, as OPUS-MT's releases have
        joint = list(dict.fromkeys(normal_pieces(source_spm) + normal_pieces(target_spm)))
        source_size = target_size = write_vocabulary(path["vocab.yml"], joint)
        vocabs = ["vocab.yml", "vocab.yml"]
    else:
        source_size = write_vocabulary(path["vocab.src.yml"], normal_pieces(source_spm))
        target_size = write_vocabulary(path["vocab.trg.yml"], normal_pieces(target_spm))
        vocabs = ["vocab.src.yml", "vocab.trg.yml"]
    for name in set(path) - {"decoder.yml", "model.npz", "model.ctranslate2.npz",
                             "source.spm", "target.spm"} - set(vocabs):
        del path[name]
    weights = marian_weights(options, source_size, target_size)
    weights["special:model.yml"] = config_entry(config_text or model_yml(options))
    np.savez(path["model.npz"], **weights)
    np.savez(path["model.ctranslate2.npz"], **weights,
             Wpos=marian_sinusoids(1024, options.dim_emb))
    with open(path["decoder.yml"], "w", encoding="utf-8") as f:
        yaml.safe_dump({"models": ["model.npz"], "vocabs": vocabs, "beam-size": 4}, f)
    path["vocabs"] = [os.path.join(folder, name) for name in vocabs]
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--source_text", required=True, help="a file to train source.spm on")
    parser.add_argument("--target_text", required=True, help="a file to train target.spm on")
    parser.add_argument("--lines", type=int, default=3000, help="lines of each text used")
    parser.add_argument("--pre_norm", action="store_true")
    parser.add_argument("--tied", choices=("all", "decoder", "none"), default="all")
    parser.add_argument("--activation", choices=("swish", "relu", "gelu"), default="swish")
    args = parser.parse_args()
    lines = []
    for text in (args.source_text, args.target_text):
        with open(text, encoding="utf-8") as f:
            lines.append(f.read().splitlines()[: args.lines])
    options = MarianOptions(pre_norm=args.pre_norm, tied=args.tied, activation=args.activation)
    written = write_opus_mt_folder(args.output_dir, *lines, options)
    print(f"A random Marian Transformer ({options}) in {args.output_dir}: "
          f"{', '.join(sorted(os.path.basename(p) for k, p in written.items() if k != 'vocabs'))}")


if __name__ == "__main__":
    main()
