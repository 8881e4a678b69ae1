"""The flags that name a run's folders and its served model, shared by several commands
(trainer, decoder, exporter, avg_checkpoints, serve, query) and so defined once here; and the
flags a run recorded in its flags.txt."""

import os

from absl import flags

from t2t_repro.names import FLAGS_FILENAME

flags.DEFINE_string("output_dir", None, "The training run: checkpoints, TensorBoard events, "
                    "hparams.json, flags.txt.")
flags.DEFINE_string("export_dir", None, "Exported versions: integer-named version folders "
                    "(default: <output_dir>/export); serve takes the newest.")
flags.DEFINE_string("model_name", "default", "The served model's name, in its URLs "
                    "/v1/models/NAME.")


def recorded_flags(output_dir):
    """{name: value text} of the `--name=value` lines in `output_dir`/flags.txt ({} if none)."""
    path = os.path.join(output_dir, FLAGS_FILENAME)
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        pairs = (line.strip()[2:].split("=", 1) for line in f if line.startswith("--"))
        return {pair[0]: pair[1] for pair in pairs if len(pair) == 2}
