"""Exports a trained model as a SavedModel that takes text and returns text (TF Serving's layout).

    python -m t2t_repro.exporter --problem=translate_ende --data_dir=D --output_dir=RUN \\
        [--checkpoint_path=RUN/avg] [--export_dir=RUN/export] \\
        [--decode_hparams="beam_size=4,alpha=0.6,extra_length=50"] [--max_input_tokens=N]

writes `<export_dir>/<version>/` (version: the checkpoint's step unless --version), never over an
earlier version. The hparams and weights are found as the decoder finds them; the decode
hparams are baked into the graph. Serve it with `python -m t2t_repro.serve` or TF Serving.
"""

import datetime
import sys

from t2t_repro import quiet_tensorflow

quiet_tensorflow.import_tensorflow()  # before anything imports it: see the module

from absl import app, flags, logging  # noqa: E402

from t2t_repro import problem_flags, trained_model_flags, usr_dir  # noqa: E402
from t2t_repro.command_line import exit_on_usage_errors  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_string("export_dir", None, "Where versions go (default: <output_dir>/export).")
flags.DEFINE_integer("version", None,
                     "The version folder's number (default: the checkpoint's step).")
flags.DEFINE_integer("max_input_tokens", None,
                     "The longest input accepted, in tokens with EOS (default: hparam "
                     "max_length); longer inputs are an error, never truncated.")


def run():
    import os

    from t2t_repro.decoding.text_decoding import create_decode_hparams
    from t2t_repro.serving.export import TextToTextModule, export_version, write_export

    problem = problem_flags.create_problem()
    problem.check_data()
    hparams = trained_model_flags.resolve_hparams()
    decode_hparams = create_decode_hparams(problem, FLAGS.decode_hparams)
    checkpoint, model = trained_model_flags.load_model(problem, hparams)
    module = TextToTextModule(model, problem, decode_hparams, FLAGS.max_input_tokens)
    version = FLAGS.version if FLAGS.version is not None else export_version(checkpoint)
    info = {
        "problem": problem.name,
        "checkpoint": os.path.abspath(checkpoint),
        "hparams": hparams.values(),
        "decode_hparams": decode_hparams.values(),
        "max_input_tokens": module.max_input_tokens,
        "exported": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    path = write_export(module, FLAGS.export_dir or os.path.join(FLAGS.output_dir, "export"),
                        version, info)
    print(f"Exported {checkpoint} as version {version}: {path} (beam_size="
          f"{decode_hparams.beam_size}, alpha={decode_hparams.alpha}, extra_length="
          f"{decode_hparams.extra_length}, max_input_tokens={module.max_input_tokens}).",
          file=sys.stderr)


def main(argv):
    exit_on_usage_errors(argv, ("problem", "output_dir"), hint="see --helpfull")
    logging.set_verbosity(logging.WARNING)  # tf.saved_model.save logs every file it writes
    usr_dir.import_flagged_usr_dir()
    from t2t_repro.serving.export import ExportError

    trained_model_flags.run_reporting_errors(run, ExportError)


if __name__ == "__main__":
    app.run(main)
