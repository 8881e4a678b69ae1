"""The flags that name a run's folders and its served model, shared by several commands
(trainer, decoder, exporter, avg_checkpoints, serve, query) and so defined once here."""

from absl import flags

flags.DEFINE_string("output_dir", None, "The training run: checkpoints, TensorBoard events, "
                    "hparams.json, flags.txt.")
flags.DEFINE_string("export_dir", None, "Exported versions: integer-named version folders "
                    "(default: <output_dir>/export); serve takes the newest.")
flags.DEFINE_string("model_name", "default", "The served model's name, in its URLs "
                    "/v1/models/NAME.")
