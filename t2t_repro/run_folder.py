"""The names of what a training run's folder (--output_dir) holds, in one place for every
command that writes or reads it."""

HPARAMS_FILENAME = "hparams.json"
FLAGS_FILENAME = "flags.txt"
AVERAGED_MARKER = "averaged.json"  # marks avg_checkpoints' output folder
EXPORT_SUBDIR = "export"  # the exporter's default --export_dir
CTRANSLATE2_SUBDIR = "ctranslate2"
AVERAGED_SUBDIR = "averaged"  # avg_checkpoints' default --avg_dir
EVAL_ATTENTION_SUBDIR = "eval_attention"  # TensorBoard's attention images
