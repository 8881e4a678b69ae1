"""Flags shared by the entry points that prepare or read a problem's data (trainer, datagen)."""

from absl import flags

FLAGS = flags.FLAGS

flags.DEFINE_string("problem", None, "Registered problem.")
flags.DEFINE_string("data_dir", None,
                    "Where the problem's generated data (vocabulary, TFRecords) lives.")
flags.DEFINE_string("tmp_dir", None, "Where the problem's raw files are found, or downloaded to.")
flags.DEFINE_string("data_hparams", "",
                    'Overrides of the problem\'s data settings, "name=value,...", e.g. '
                    '"vocab_size=8000" for a small corpus; used when generating, checked after.')
flags.DEFINE_bool("download", True,
                  "Download raw data that --tmp_dir lacks (WMT14 through tensorflow-datasets); "
                  "with --nodownload, missing files are an error.")


def create_problem():
    """The --problem instance over --data_dir with --data_hparams."""
    from t2t_repro import registry

    return registry.problems[FLAGS.problem](
        data_dir=FLAGS.data_dir, data_hparams=FLAGS.data_hparams
    )

