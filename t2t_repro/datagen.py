"""Generates a problem's data once: raw text -> subword vocabulary -> sharded TFRecords.

    python -m t2t_repro.datagen --problem=translate_ende --data_dir=data --tmp_dir=raw
    python -m t2t_repro.datagen --problem=translate_ende --data_dir=data --tmp_dir=multi30k \\
        --data_hparams=vocab_size=8000 --nodownload

Raw files are read from --tmp_dir (the accepted names are in docs/training.md, "Raw files
instead of the download", and in the error that lists them); WMT14 is downloaded through
tensorflow-datasets when they are absent. Running it again with the data present does nothing.
"""

from t2t_repro.cli import quiet_tensorflow

quiet_tensorflow.import_tensorflow()  # before anything imports it: see the module

from t2t_repro.cli import entry_point, output_paths, problem_flags, usr_dir  # noqa: E402
from t2t_repro.cli.entry_point import check_usage  # noqa: E402

FLAGS = problem_flags.FLAGS


def main(argv):
    check_usage(argv, ("problem", "data_dir"))
    output_paths.check_output_dir(FLAGS.data_dir, "--data_dir")
    usr_dir.import_flagged_usr_dir()
    problem = problem_flags.create_problem()
    problem.generate_data(FLAGS.tmp_dir, download=FLAGS.download)


if __name__ == "__main__":
    entry_point.run(main, ("problem", "data_dir", "tmp_dir", "data_hparams", "download",
                           "t2t_usr_dir"))
