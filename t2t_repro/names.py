"""Names the package shares, defined once: what a training run's folder holds, the exported
model's signatures, and the ids every vocabulary reserves."""

# A training run's folder (--output_dir).
HPARAMS_FILENAME = "hparams.json"
FLAGS_FILENAME = "flags.txt"
AVERAGED_MARKER = "averaged.json"  # marks avg_checkpoints' output folder
EXPORT_SUBDIR = "export"  # the exporter's default --export_dir for SavedModels
CTRANSLATE2_SUBDIR = "ctranslate2"  # and for CTranslate2 models
AVERAGED_SUBDIR = "averaged"  # avg_checkpoints' default --avg_dir
EVAL_ATTENTION_SUBDIR = "eval_attention"  # TensorBoard's attention images, a run of their own
LOCK_FILENAME = ".lock"  # locked by the trainer writing the folder (cli.run_folder_lock)
BEST_SUBDIR = "best"  # the best checkpoint by the eval metric (training.best_checkpoint)
BEST_RECORD_FILENAME = "best.json"  # in BEST_SUBDIR: its step, metric, value and decodes file
# The subfolders of a run that the trainer (TensorBoard's runs, named after the modes train
# and eval; the attention images; the best checkpoint) and the exporter write.
RUN_SUBDIRS = ("train", "eval", EVAL_ATTENTION_SUBDIR, BEST_SUBDIR, EXPORT_SUBDIR,
               CTRANSLATE2_SUBDIR)
# The attribute of a checkpoint file's root holding its model's hparams, as JSON
# (training.checkpoints.save_weights).
CHECKPOINT_HPARAMS_ATTRIBUTE = "t2t_repro_hparams"
# The attribute holding the SHA-256 digests of the vocabulary files its model was built for,
# as JSON {"source": ..., "target": ...} (training.checkpoints.save_weights).
CHECKPOINT_VOCABULARIES_ATTRIBUTE = "t2t_repro_vocabularies"
# The attribute holding the name of the problem its model was built for.
CHECKPOINT_PROBLEM_ATTRIBUTE = "t2t_repro_problem"

# The commands' flags that name files or folders (`--checkpoint_path` may name several, comma
# separated; the list flags hold one path an item): a leading `~` in them is the home folder
# (`cli.entry_point.expand_home`), and a run's flags.txt records them as absolute paths
# (`training.run_records.flag_line`), so the commands that read it work from any folder.
PATH_FLAGS = ("avg_dir", "checkpoint", "checkpoint_path", "ct2_dir", "data_dir",
              "decode_from_file", "decode_reference", "decode_to_file", "export_dir",
              "inputs_file", "model_dir", "model_file", "output_dir", "plot_dir", "reference",
              "score_file", "sentencepiece_models", "t2t_usr_dir", "target_prefix_file",
              "tmp_dir", "translation", "vocab_file", "vocabs", "warm_start_from")

# The file each export format writes into a version folder (`<export_dir>/<version>/`).
EXPORT_FORMAT_FILES = {"saved_model": "saved_model.pb", "ctranslate2": "model.bin"}

# The exported SavedModel's signatures (and TF Serving's default signature name).
BEST_SIGNATURE = "serving_default"
BEAMS_SIGNATURE = "beams"
SCORE_SIGNATURE = "score"

# Ids every vocabulary reserves: padding (also the decoder's start symbol) and end of sequence.
PAD_ID = 0
EOS_ID = 1
