"""--checkpoint_path, shared by the commands that read a trained run's weights (decoder,
exporter, visualize, the CTranslate2 conversion) and by avg_checkpoints, so defined once here."""

from absl import flags

flags.DEFINE_string("checkpoint_path", None,
                    "Checkpoint file or directory (its latest checkpoint), such as "
                    "<output_dir>/best or avg_checkpoints' output; default: the latest in "
                    "--output_dir. avg_checkpoints averages the --n checkpoints ending at it.")
