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


def resolve_hparams(output_dir, saved_when_no_set=False, base_when_no_set=None, reading=False):
    """The set with overrides applied, checked against what `output_dir` was trained with.

    With `saved_when_no_set` (reading a trained model), no --hparams_set means the hparams saved
    in `output_dir`; with `base_when_no_set` (HParams: a run to fine-tune, whose hparams may be
    no registered set, an imported model's), those; else --hparams_set is required. Either
    way --hparams applies, and must leave what `output_dir` saved as it is (`reading`: the
    command reads the trained model; `run_records.check_saved_hparams`).
    """
    from t2t_repro import hparams as hparams_lib
    from t2t_repro.training import run_records

    saved = hparams_lib.load(output_dir)
    if saved_when_no_set and saved is not None and not FLAGS.hparams_set:
        base_when_no_set = saved
    if FLAGS.hparams_set:
        hparams = hparams_lib.create_hparams(FLAGS.hparams_set, FLAGS.hparams)
    elif base_when_no_set is not None:
        hparams = hparams_lib.HParams(**base_when_no_set.values())
        hparams.override_from_string(FLAGS.hparams)
    else:
        raise ConfigurationError(
            f"missing --hparams_set ({output_dir} has no {hparams_lib.HPARAMS_FILENAME}); see "
            f"--registry_help for the registered sets."
        )
    run_records.check_saved_hparams(output_dir, hparams, reading)
    return hparams


def check_model_name():
    from t2t_repro import registry

    if FLAGS.model not in registry.models:
        raise ConfigurationError(registry.models.unknown_name_message(FLAGS.model))
