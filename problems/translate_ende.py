"""WMT14 English-German (paper §5.1), and German-English as `translate_ende_rev`."""

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
class TranslateEnde(TranslateProblem):
    """WMT14 English->German: ~4.5M training pairs, one shared BPE vocabulary of 37,000 pieces;
    newstest2013 is the eval (dev) set."""

    target_language = "de"
    default_vocab_size = 37000
    raw_layouts = {TRAIN: wmt14_training_layouts("de"), EVAL: newstest_layouts(2013, "de")}
    tfds_name = "wmt14_translate/de-en"
    tfds_splits = WMT14_TFDS_SPLITS


register_reversed(problems, TranslateEnde)
