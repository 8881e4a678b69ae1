"""WMT14 English-French (paper §5.1), and French-English as `translate_enfr_rev`."""

from t2t_repro.data.problem import EVAL, TRAIN
from t2t_repro.data.text_problem import register_reversed
from t2t_repro.data.translation import (
    WMT14_TFDS_SPLITS,
    TranslateProblem,
    newstest_layouts,
    wmt14_training_layouts,
)
from t2t_repro.registry import problems


@problems.register
class TranslateEnfr(TranslateProblem):
    """WMT14 English->French: ~36M training pairs, a shared 32,000-piece vocabulary (the paper's
    word pieces; BPE here, see `t2t_repro.data.vocabulary`); newstest2013 is the eval set."""

    target_language = "fr"
    default_vocab_size = 32000
    raw_layouts = {TRAIN: wmt14_training_layouts("fr"), EVAL: newstest_layouts(2013, "fr")}
    tfds_name = "wmt14_translate/fr-en"
    tfds_splits = WMT14_TFDS_SPLITS


register_reversed(problems, TranslateEnfr)
