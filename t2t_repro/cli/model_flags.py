"""Flags shared by the entry points that build a trained model (trainer, decoder), and the
hparams they resolve: the set with its overrides, checked against what --output_dir holds."""

from absl import flags

from t2t_repro.cli import run_flags  # noqa: F401 (--output_dir)
from t2t_repro.errors import ConfigurationError

FLAGS = flags.FLAGS

flags.DEFINE_string("model", "transformer", "Registered model.")
flags.DEFINE_string("hparams_set", None, "Registered hparams set.")
flags.DEFINE_string("hparams", "", 'Overrides of the set, "name=value,name2=value2".')
flags.DEFINE_string("decode_hparams", "",
                    'Overrides of the problem\'s beam search settings, e.g. "beam_size=4,'
                    'alpha=0.6,extra_length=50,batch_size=32" (the translation defaults; '
                    'parsing: beam 21, alpha 0.3, +300).')


def resolve_hparams(output_dir, saved_when_no_set=False):
    """The set with overrides applied, checked against what `output_dir` was trained with.

    With `saved_when_no_set` (reading a trained model), no --hparams_set means the hparams saved
    in `output_dir`; without it (training), --hparams_set is required.
    """
    from t2t_repro import hparams as hparams_lib

    saved = hparams_lib.load(output_dir)
    if saved_when_no_set and saved is not None and not FLAGS.hparams_set:
        return saved
    if not FLAGS.hparams_set:
        raise ConfigurationError(
            f"missing --hparams_set ({output_dir} has no {hparams_lib.HPARAMS_FILENAME}); see "
            f"--registry_help for the registered sets."
        )
    hparams = hparams_lib.create_hparams(FLAGS.hparams_set, FLAGS.hparams)
    if saved is not None and saved != hparams:
        raise ConfigurationError(
            f"{output_dir} holds a run trained with different hparams "
            f"({', '.join(hparams.differences(saved))} differ). Use the same "
            f"--hparams_set and --hparams (see {output_dir}/{hparams_lib.HPARAMS_FILENAME} and "
            f"flags.txt), or another --output_dir."
        )
    return hparams


def check_model_name():
    from t2t_repro import registry

    if FLAGS.model not in registry.models:
        raise ConfigurationError(registry.models.unknown_name_message(FLAGS.model))
