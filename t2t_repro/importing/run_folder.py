"""An imported model written as a run of `translate_text_files` with separate vocabularies,
laid out as the trainer and datagen lay out their own, so that every command reads it as one:

    <output_dir>/hparams.json, ckpt-0.weights.h5, flags.txt   as the trainer writes them
    <output_dir>/imported.json                                 where it came from, its options
    <output_dir>/data/translate_text_files.{source,target}.spm.model (and .vocab listings),
                      or .subwords (a tensor2tensor run's SubwordTextEncoder vocabulary),
                      translate_text_files.datagen.json        as datagen writes them, with no
                                                               examples

The folder is assembled under a temporary name and renamed at the end, so an error leaves
nothing behind.
"""

import json
import os
import shutil

from t2t_repro import hparams as hparams_lib
from t2t_repro.errors import ConfigurationError
from t2t_repro.names import FLAGS_FILENAME
from t2t_repro.training.run_records import flag_line
from t2t_repro.utils.atomic_files import atomic_path, write_text_atomically

PROBLEM = "translate_text_files"
DATA_SUBDIR = "data"
IMPORT_RECORD = "imported.json"


def write_run(imported, output_dir, source_language, target_language):
    """Writes `imported` (an `ImportedModel`) as a run in `output_dir`, which must not exist
    yet; returns the problem, whose vocabularies are the run's."""
    from t2t_repro import registry
    from t2t_repro.data.text_problem import SENTENCEPIECE, SOURCE, TARGET, write_piece_listing
    from t2t_repro.importing.vocabularies import write_model
    from t2t_repro.training.checkpoints import CheckpointManager
    from t2t_repro.training.run import build_model, compile_for_training

    output_dir = os.path.abspath(output_dir)
    if os.path.exists(output_dir):
        raise ConfigurationError(f"--output_dir={output_dir} already exists; an import writes "
                                 f"a new run folder, never into an existing one.")
    with atomic_path(output_dir) as folder:
        data_dir = os.path.join(folder, DATA_SUBDIR)
        os.makedirs(data_dir)
        problem = registry.problems[PROBLEM](
            data_dir=data_dir, data_hparams=f"shared_vocabulary=false,source_language="
                                            f"{source_language},target_language={target_language}")
        sentencepiece = imported.vocabulary_format == SENTENCEPIECE
        for side, model in ((SOURCE, imported.source_model), (TARGET, imported.target_model)):
            path = problem.vocabulary_file(side, imported.vocabulary_format)
            if sentencepiece:
                write_model(model, path)
            else:
                shutil.copyfile(model.model_path, path)
        source_size, target_size = (
            len(model.pieces) if sentencepiece else model.vocab_size
            for model in (imported.source_model, imported.target_model))
        metadata = {"problem": PROBLEM, "data_hparams": problem.data_hparams.values(),
                    "vocabulary_format": imported.vocabulary_format,
                    "vocab_size": source_size, "source_vocab_size": source_size,
                    "target_vocab_size": target_size, "splits": {}}
        write_text_atomically(problem.metadata_path, json.dumps(metadata, indent=1))
        for vocabulary in dict.fromkeys((problem.source_vocabulary, problem.target_vocabulary)):
            if sentencepiece:
                write_piece_listing(vocabulary)
        hparams = imported.hparams
        model = compile_for_training(build_model("transformer", hparams, problem), hparams)
        imported.set_weights(model)
        CheckpointManager(folder, model).save()
        hparams_lib.save(hparams, folder)
        write_text_atomically(os.path.join(folder, FLAGS_FILENAME), "".join(
            flag_line(name, value) + "\n" for name, value in (
                ("problem", PROBLEM), ("data_dir", os.path.join(output_dir, DATA_SUBDIR)),
                ("output_dir", output_dir))))
        record = {**imported.description, "vocabulary_counts": imported.vocabulary_counts}
        write_text_atomically(os.path.join(folder, IMPORT_RECORD), json.dumps(record, indent=1))
    problem.data_dir = os.path.join(output_dir, DATA_SUBDIR)
    return problem
