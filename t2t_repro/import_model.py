"""Imports another toolkit's trained Transformer as a run of this project.

    python -m t2t_repro.import_model --format=opus_mt --model_dir=opus-mt-de-en \\
        --source_language=de --target_language=en --output_dir=runs/opus_deen
    python -m t2t_repro.import_model --format=tensor2tensor --checkpoint=t2t_train/ende \\
        --problem=translate_ende_wmt32k --data_dir=t2t_data --num_heads=8 \\
        --source_language=en --target_language=de --output_dir=runs/t2t_ende
    python -m t2t_repro.import_model --format=marian --model_file=model.npz \\
        --vocabs=vocab.src.yml,vocab.trg.yml --sentencepiece_models=source.spm,target.spm \\
        --source_language=de --target_language=en --output_dir=runs/marian_deen

The run folder holds hparams.json, a checkpoint (step 0), flags.txt and the vocabularies as a
`translate_text_files` run does, so the decoder, BLEU, the exporter (both formats), the server
and the trainer's --warm_start_from take it as they take one trained here
(docs/importing.md).
"""

from t2t_repro.cli import quiet_tensorflow

quiet_tensorflow.import_tensorflow()  # before anything imports it: see the module

from absl import flags  # noqa: E402

# run_flags: --output_dir; problem_flags: --problem, --data_dir (defined once for every command)
from t2t_repro.cli import entry_point, output_paths, problem_flags, run_flags  # noqa: E402,F401
from t2t_repro.cli.entry_point import check_usage  # noqa: E402
from t2t_repro.errors import ConfigurationError  # noqa: E402

FLAGS = flags.FLAGS

FORMATS = ("opus_mt", "marian", "tensor2tensor")
flags.DEFINE_enum("format", None, FORMATS, "What to import: an OPUS-MT release folder "
                  "(--model_dir), or a Marian model's files (--model_file, --vocabs, "
                  "--sentencepiece_models).")
flags.DEFINE_string("model_dir", None, "opus_mt: the release folder (decoder.yml, the .npz, "
                    "the vocabulary .yml, source.spm, target.spm).")
flags.DEFINE_string("model_file", None, "marian: the model's .npz.")
flags.DEFINE_list("vocabs", None, "marian: the source and target vocabulary .yml files (one "
                  "file for both when the vocabulary is joint).")
flags.DEFINE_list("sentencepiece_models", None, "marian: the source and target SentencePiece "
                  "models (one file for both when they are the same).")
flags.DEFINE_string("checkpoint", None, "tensor2tensor: the checkpoint (its folder, a "
                    "checkpoint prefix, or one of its files) of a `transformer` model.")
flags.DEFINE_string("vocab_file", None, "tensor2tensor: its SubwordTextEncoder vocabulary "
                    "file (or give --problem and --data_dir).")
flags.DEFINE_integer("num_heads", None, "tensor2tensor (required): attention heads, which a "
                     "checkpoint does not record (transformer_base 8, transformer_big 16).",
                     lower_bound=1)
flags.DEFINE_integer("target_space_id", 0, "tensor2tensor: the problem's target space, the "
                     "row of target_space_embedding added to the encoder input (0, GENERIC, "
                     "for current translate problems; older ones used e.g. DE_TOK 8).",
                     lower_bound=0)
flags.DEFINE_string("source_language", None, "The source language's code (e.g. de), as "
                    "translate_text_files records it.")
flags.DEFINE_string("target_language", None, "The target language's code (e.g. en): BLEU's "
                    "tokenizer follows it.")

# The flags each format reads, beside --output_dir and the languages.
FORMAT_FLAGS = {"opus_mt": ("model_dir",),
                "marian": ("model_file", "vocabs", "sentencepiece_models"),
                "tensor2tensor": ("checkpoint",)}
# Flags only --format=tensor2tensor reads, beside --checkpoint (--problem: the problem it was
# trained on, whose vocab.<problem>.*.subwords in --data_dir is its vocabulary; --num_heads is
# required, and `import_tensor2tensor` says why when it is missing).
TENSOR2TENSOR_OPTIONS = ("vocab_file", "problem", "data_dir", "num_heads", "target_space_id")
# Flags of problem_flags that no format reads.
UNUSED_PROBLEM_FLAGS = ("tmp_dir", "data_hparams", "download")


def source_and_target(name):
    """The two files a list flag names, or its one file twice."""
    values = FLAGS[name].value
    if len(values) not in (1, 2):
        raise ConfigurationError(f"--{name} names {len(values)} files; give the source's and "
                                 f"the target's, or one for both.")
    return values if len(values) == 2 else values * 2


def main(argv):
    from t2t_repro.importing import marian
    from t2t_repro.importing.run_folder import write_run
    from t2t_repro.metrics.bleu import check_language_code

    check_usage(argv, ("format", "output_dir", "source_language", "target_language"))
    for name in ("source_language", "target_language"):
        check_language_code(FLAGS[name].value, f"--{name}")
    check_usage(argv, FORMAT_FLAGS[FLAGS.format], hint=f"--format={FLAGS.format} reads them")
    others = [f"--{name}" for format_name, names in FORMAT_FLAGS.items()
              if format_name != FLAGS.format for name in names if FLAGS[name].present]
    if FLAGS.format != "tensor2tensor":
        others += [f"--{name}" for name in TENSOR2TENSOR_OPTIONS if FLAGS[name].present]
    others += [f"--{name}" for name in UNUSED_PROBLEM_FLAGS if FLAGS[name].present]
    if others:
        raise ConfigurationError(f"{', '.join(others)} {'does' if len(others) == 1 else 'do'} "
                                 f"not apply to --format={FLAGS.format}.")
    output_paths.check_output_dir(FLAGS.output_dir)
    if FLAGS.format == "tensor2tensor":
        return import_tensor2tensor()
    if FLAGS.format == "opus_mt":
        files = marian.opus_mt_files(FLAGS.model_dir)
    else:
        files = marian.MarianFiles(FLAGS.model_file, *source_and_target("vocabs"),
                                   *source_and_target("sentencepiece_models"))
    imported = marian.marian_model(files)
    problem = write_run(imported, FLAGS.output_dir, FLAGS.source_language,
                        FLAGS.target_language)
    counts = imported.vocabulary_counts
    hp = imported.hparams
    print(f"Imported {files.model}: {hp.num_encoder_layers}+{hp.num_decoder_layers} layers, "
          f"d_model {hp.hidden_size}, {'pre' if hp.normalize_first else 'post'}-norm, "
          f"{hp.ffn_activation}; {problem.input_vocab_size}-id source and "
          f"{problem.target_vocab_size}-id target vocabularies -> {FLAGS.output_dir}")
    for side, side_counts in counts.items():
        if side_counts["model_pieces_not_in_vocabulary"]:
            print(f"  {side}: {side_counts['model_pieces_not_in_vocabulary']} pieces of the "
                  f"SentencePiece model are not in the vocabulary; sentencepiece segments "
                  f"around them (Marian would read each as <unk>).")


def import_tensor2tensor():
    from t2t_repro.importing import tensor2tensor
    from t2t_repro.importing.run_folder import write_run

    if FLAGS.num_heads is None:
        raise ConfigurationError("--format=tensor2tensor needs --num_heads: a checkpoint does "
                                 "not record its attention heads (the hparams set it was "
                                 "trained with does: transformer_base 8, transformer_big 16).")
    if (FLAGS.vocab_file is None) == (FLAGS.problem is None or FLAGS.data_dir is None):
        raise ConfigurationError("--format=tensor2tensor needs its vocabulary: --vocab_file, or "
                                 "--problem and --data_dir (not both).")
    vocab_file = FLAGS.vocab_file or tensor2tensor.vocabulary_file(FLAGS.data_dir, FLAGS.problem)
    imported = tensor2tensor.tensor2tensor_model(FLAGS.checkpoint, vocab_file, FLAGS.num_heads,
                                                 FLAGS.target_space_id)
    write_run(imported, FLAGS.output_dir, FLAGS.source_language, FLAGS.target_language)
    hp = imported.hparams
    print(f"Imported {FLAGS.checkpoint}: {hp.num_encoder_layers}+{hp.num_decoder_layers} "
          f"layers, d_model {hp.hidden_size}, {hp.num_heads} heads, "
          f"{imported.description['layout']}; "
          f"{imported.source_model.vocab_size} subtokens ({vocab_file}) -> {FLAGS.output_dir}")


if __name__ == "__main__":
    entry_point.run(main, ("output_dir", "problem", "data_dir"))
