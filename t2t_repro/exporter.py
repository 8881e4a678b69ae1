"""Exports a trained model in one of two formats, as OpenNMT-tf's exporters do.

    python -m t2t_repro.exporter --output_dir=RUN [--export_format=saved_model] \\
        [--checkpoint_path=RUN/avg] [--export_dir=RUN/export] [--version=N] \\
        [--decode_hparams="beam_size=4,alpha=0.6,extra_length=50"] [--max_input_tokens=N] \\
        [--decode_precision=bfloat16]
    python -m t2t_repro.exporter --output_dir=RUN --export_format=ctranslate2 \\
        [--export_dir=RUN/ctranslate2] [--quantization=int8] \\
        [--decode_hparams="alignment_layer=-1,alignment_heads=0"]

`saved_model`: a SavedModel that takes text and returns text, in TF Serving's layout; the decode
hparams are baked into the graph, and with --decode_precision=bfloat16 its weights are bfloat16
and it decodes and scores as the decoder does with that flag. Serve it with
`python -m t2t_repro.serve` or TF Serving.
`ctranslate2`: CTranslate2's model folder with the problem's sentencepiece model beside it, for
inference without TensorFlow (`t2t_repro.serving.ctranslate2_model` says how to translate with
it; needs the `bench` extra). Either is written as `<export_dir>/<version>/` (version: the
checkpoint's step unless --version), never over an earlier version. The problem, data and
hparams are the run's (its flags.txt and hparams.json), the weights its newest checkpoint.
"""

import os
import sys

from t2t_repro.cli import quiet_tensorflow

quiet_tensorflow.import_tensorflow()  # before anything imports it: see the module

from absl import flags, logging  # noqa: E402

from t2t_repro.cli import entry_point, output_paths, problem_flags, trained_run  # noqa: E402
from t2t_repro.cli import precision_flag  # noqa: E402,F401 (--decode_precision)
from t2t_repro import names  # noqa: E402
from t2t_repro.errors import ConfigurationError  # noqa: E402

FLAGS = flags.FLAGS

EXPORT_FORMATS = ("saved_model", "ctranslate2")
_DEFAULT_SUBDIRS = {"saved_model": names.EXPORT_SUBDIR,
                    "ctranslate2": names.CTRANSLATE2_SUBDIR}

flags.DEFINE_enum("export_format", "saved_model", EXPORT_FORMATS,
                  "saved_model (text in, text out, for TF Serving) or ctranslate2.")
flags.DEFINE_integer("version", None,
                     "The version folder's number (default: the checkpoint's step).",
                     lower_bound=0)
flags.DEFINE_string("quantization", "float32",
                    "ctranslate2: the weight type, float32, int8, int8_float32, int16, float16 "
                    "or bfloat16.")

# The decode hparams each format reads (a SavedModel refuses return_alignments and sampling with
# reasons of their own); another set in --decode_hparams is an error rather than ignored.
FORMAT_DECODE_HPARAMS = {
    "saved_model": ("beam_size", "alpha", "extra_length", "return_alignments", "sampling_method"),
    "ctranslate2": ("alignment_layer", "alignment_heads"),
}
_WHAT_EACH_FORMAT_READS = {
    "saved_model": "beam_size, alpha and extra_length",
    "ctranslate2": "alignment_layer and alignment_heads; CTranslate2 is given a search's "
                   "settings when it translates",
}


def check_format_flags():
    """A flag of the other format is a ConfigurationError rather than silently ignored."""
    if FLAGS.export_format == "ctranslate2" and FLAGS.max_input_tokens is not None:
        raise ConfigurationError("--max_input_tokens applies to --export_format=saved_model "
                                 "only; CTranslate2 takes inputs of any length.")
    if FLAGS.export_format == "saved_model" and FLAGS["quantization"].present:
        raise ConfigurationError("--quantization applies to --export_format=ctranslate2 only; "
                                 "a SavedModel takes --decode_precision.")
    if FLAGS.export_format == "ctranslate2" and FLAGS["decode_precision"].present:
        raise ConfigurationError("--decode_precision applies to --export_format=saved_model "
                                 "only; CTranslate2's weight type is --quantization.")
    if FLAGS.decode_precision == "int8":
        raise ConfigurationError("--decode_precision=int8 is the decoder's only: a SavedModel "
                                 "holds float32 or bfloat16 weights (CTranslate2 exports int8: "
                                 "--export_format=ctranslate2 --quantization=int8).")


def format_decode_hparams(problem):
    """--decode_hparams, set only where --export_format reads them (HParamsError)."""
    from t2t_repro.decoding.text_decoding import decode_hparams_read_by

    return decode_hparams_read_by(problem, FLAGS.decode_hparams,
                                  FORMAT_DECODE_HPARAMS[FLAGS.export_format],
                                  f"--export_format={FLAGS.export_format}",
                                  _WHAT_EACH_FORMAT_READS[FLAGS.export_format])


def export_saved_model(problem, hparams, decode_hparams, checkpoint, model, target):
    import datetime

    from t2t_repro.decoding.precision import model_in_precision
    from t2t_repro.serving.export import TextToTextModule, write_export

    module = TextToTextModule(model_in_precision(model, FLAGS.decode_precision), problem,
                              decode_hparams, FLAGS.max_input_tokens)
    info = {
        "problem": problem.name,
        "checkpoint": os.path.abspath(checkpoint),
        "hparams": model.hparams.values(),  # as the problem's data adapts them
        "decode_hparams": decode_hparams.values(),
        "decode_precision": FLAGS.decode_precision,
        "max_input_tokens": module.max_input_tokens,
        "exported": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    write_export(module, os.path.dirname(target), int(os.path.basename(target)), info)
    return (f"beam_size={decode_hparams.beam_size}, alpha={decode_hparams.alpha}, extra_length="
            f"{decode_hparams.extra_length}, max_input_tokens={module.max_input_tokens}, "
            f"in {FLAGS.decode_precision}")


def export_ctranslate2(problem, hparams, decode_hparams, checkpoint, model, target):
    from t2t_repro.decoding.alignments import check_alignment_hparams
    from t2t_repro.serving.ctranslate2_model import write_ctranslate2_model

    # CTranslate2's return_attention: the decode hparams' alignment layer and heads.
    check_alignment_hparams(decode_hparams, len(model.decoder_layers), hparams.num_heads)
    info = {"problem": problem.name, "checkpoint": os.path.abspath(checkpoint),
            "hparams": model.hparams.values()}
    write_ctranslate2_model(model, problem, target, FLAGS.quantization, info,
                            alignment_layer=decode_hparams.alignment_layer,
                            alignment_heads=decode_hparams.alignment_heads)
    return (f"quantization={FLAGS.quantization}, alignment_layer="
            f"{decode_hparams.alignment_layer}, alignment_heads={decode_hparams.alignment_heads}")


EXPORTERS = {"saved_model": export_saved_model, "ctranslate2": export_ctranslate2}


def export(target=None):
    """Exports the run's model in --export_format to `target` (default:
    `<export_dir>/<version>/`)."""
    from t2t_repro.serving.export import check_export_format, export_version

    check_format_flags()
    if target is None:
        default_subdir = _DEFAULT_SUBDIRS[FLAGS.export_format]
        export_dir = FLAGS.export_dir or os.path.join(FLAGS.output_dir, default_subdir)
        output_paths.check_output_dir(export_dir, "--export_dir")
        check_export_format(export_dir, FLAGS.export_format,
                            f"by default, --export_format={FLAGS.export_format} writes to "
                            f"<output_dir>/{default_subdir}")
    problem = problem_flags.create_problem()
    problem.check_data()
    decode_hparams = format_decode_hparams(problem)
    hparams = trained_run.resolve_hparams()
    checkpoint, model = trained_run.load_model(problem, hparams)
    if target is None:
        version = FLAGS.version if FLAGS.version is not None else export_version(checkpoint)
        target = os.path.join(export_dir, str(version))
        check_new_target(target, "export another checkpoint or pass another --version=N")
    settings = EXPORTERS[FLAGS.export_format](problem, hparams, decode_hparams, checkpoint,
                                              model, target)
    print(f"Exported {checkpoint} as {FLAGS.export_format} ({settings}): {target}",
          file=sys.stderr)


def check_new_target(target, remedy):
    """ConfigurationError, before anything is written, when the export's folder `target`
    exists: an export is never written over. `remedy`: the flags that name another."""
    if os.path.exists(target):
        raise ConfigurationError(f"{target} already exists, and an export is never written "
                                 f"over: {remedy}, or remove that folder yourself.")


def main(argv, target=None):
    logging.set_verbosity(logging.WARNING)  # tf.saved_model.save logs every file it writes
    trained_run.start_trained_run_command(argv)
    export(target)


if __name__ == "__main__":
    entry_point.run(main, (*trained_run.KEY_FLAGS, "export_dir", "decode_precision"))
