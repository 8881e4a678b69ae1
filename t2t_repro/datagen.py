"""Generates a problem's data once: raw text -> subword vocabulary -> sharded TFRecords.

    python -m t2t_repro.datagen --problem=translate_ende --data_dir=data --tmp_dir=raw
    python -m t2t_repro.datagen --problem=translate_ende --data_dir=data --tmp_dir=multi30k \\
        --data_hparams=vocab_size=8000 --nodownload

Raw files are read from --tmp_dir (the accepted names are in the README and in the error that
lists them); WMT14 is downloaded through tensorflow-datasets when they are absent. Running it
again with the data present does nothing.
"""

import os
import sys

# TensorFlow's C++ start-up chatter hides the progress lines.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # noqa: E402

from t2t_repro import problem_flags  # noqa: E402

FLAGS = problem_flags.FLAGS


def main(argv):
    if len(argv) > 1:
        sys.exit(f"error: unexpected arguments {argv[1:]}; flags look like --name=value.")
    from t2t_repro.hparams import HParamsError
    from t2t_repro.registry import RegistryError

    missing = [name for name in ("problem", "data_dir") if not FLAGS[name].value]
    if missing:
        sys.exit(f"error: missing {', '.join('--' + m for m in missing)}; see --help.")
    try:
        problem = problem_flags.create_problem()
        problem.generate_data(FLAGS.tmp_dir, download=FLAGS.download)
    except (RegistryError, HParamsError, *problem_flags.data_errors()) as error:
        sys.exit(f"error: {error}")


if __name__ == "__main__":
    app.run(main)
