"""Converts a trained model to CTranslate2, for fast CPU and GPU inference without TensorFlow.

    python -m t2t_repro.export_ctranslate2 --problem=translate_ende --data_dir=D --output_dir=RUN \\
        [--checkpoint_path=RUN/avg] [--ct2_dir=RUN/ctranslate2/<step>] [--quantization=int8]

writes CTranslate2's model folder with the problem's sentencepiece model beside it
(`sentencepiece.model`). Translate with it:

    translator = ctranslate2.Translator(CT2_DIR)
    pieces = sentencepiece.SentencePieceProcessor(model_file=f"{CT2_DIR}/sentencepiece.model")
    tokens = [pieces.encode(text, out_type=str) + ["</s>"] for text in texts]
    outputs = [pieces.decode(r.hypotheses[0]) for r in translator.translate_batch(tokens)]

CTranslate2's beam search divides scores by length^length_penalty, not the paper's
((5 + length) / 6)^alpha, so beam outputs may differ from the decoder's; greedy outputs and
log-probabilities are the same (tests/serving/test_ctranslate2_model.py). Needs the optional
extra: pip install -e ".[bench]".
"""

import sys

from t2t_repro import quiet_tensorflow

quiet_tensorflow.import_tensorflow()  # before anything imports it: see the module

from absl import app, flags, logging  # noqa: E402

from t2t_repro import problem_flags, trained_model_flags, usr_dir  # noqa: E402
from t2t_repro.command_line import exit_on_usage_errors  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_string("ct2_dir", None,
                    "The folder to write (default: <output_dir>/ctranslate2/<checkpoint step>); "
                    "never overwritten.")
flags.DEFINE_string("quantization", "float32",
                    "Weight type: float32, int8, int8_float32, int16, float16 or bfloat16.")


def run():
    import os

    from t2t_repro.serving.ctranslate2_model import write_ctranslate2_model
    from t2t_repro.serving.export import export_version

    problem = problem_flags.create_problem()
    problem.check_data()
    hparams = trained_model_flags.resolve_hparams()
    checkpoint, model = trained_model_flags.load_model(problem, hparams)
    target = FLAGS.ct2_dir or os.path.join(FLAGS.output_dir, "ctranslate2",
                                           str(export_version(checkpoint)))
    info = {"problem": problem.name, "checkpoint": os.path.abspath(checkpoint),
            "hparams": hparams.values()}
    write_ctranslate2_model(model, problem, target, FLAGS.quantization, info)
    print(f"Converted {checkpoint} to CTranslate2 ({FLAGS.quantization}): {target}",
          file=sys.stderr)


def main(argv):
    exit_on_usage_errors(argv, ("problem", "output_dir"), hint="see --helpfull")
    logging.set_verbosity(logging.WARNING)
    usr_dir.import_flagged_usr_dir()
    from t2t_repro.serving.ctranslate2_model import CTranslate2ExportError

    trained_model_flags.run_reporting_errors(run, CTranslate2ExportError)


if __name__ == "__main__":
    app.run(main)
