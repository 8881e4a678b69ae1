"""`python -m t2t_repro.exporter --export_format=ctranslate2` under a name of its own, with
--ct2_dir naming the exact folder to write.

    python -m t2t_repro.export_ctranslate2 --output_dir=RUN [--ct2_dir=RUN/ctranslate2/<step>] \\
        [--quantization=int8]
"""

from absl import flags

from t2t_repro.cli import entry_point, output_paths
from t2t_repro import exporter
from t2t_repro.errors import ConfigurationError

FLAGS = flags.FLAGS

flags.DEFINE_string("ct2_dir", None,
                    "The folder to write (default: <output_dir>/ctranslate2/<checkpoint step>); "
                    "never overwritten.")


def main(argv):
    FLAGS.export_format = "ctranslate2"
    if FLAGS.ct2_dir:
        given = [f"--{name}" for name in ("export_dir", "version") if FLAGS[name].present]
        if given:
            raise ConfigurationError(
                f"--ct2_dir names the exact folder to write; {' and '.join(given)} "
                f"name{'s' if len(given) == 1 else ''} one under --export_dir instead: give "
                f"one or the other.")
        output_paths.check_output_dir(FLAGS.ct2_dir, "--ct2_dir")
        exporter.check_new_target(FLAGS.ct2_dir, "give another --ct2_dir")
    exporter.main(argv, FLAGS.ct2_dir)


if __name__ == "__main__":
    entry_point.run(main, ("output_dir", "checkpoint_path", "quantization"))
