"""Multi30k English->German (task 1): a small real translation corpus for demos and CPU runs."""

from t2t_repro.data.problem import EVAL, TRAIN
from t2t_repro.data.translation import RawLayout, TranslateProblem
from t2t_repro.registry import problems


@problems.register
class TranslateEndeMulti30k(TranslateProblem):
    """Multi30k task 1 (image captions), English->German: 29,000 training pairs, `val` (1014)
    as the eval set; raw cased text from `train.en/.de` and `val.en/.de` in `tmp_dir`. Not
    downloadable here: tensorflow-datasets has no Multi30k builder."""

    target_language = "de"
    default_vocab_size = 8000
    raw_layouts = {
        TRAIN: (RawLayout("Multi30k plain text", (("train.en", "train.de"),)),),
        EVAL: (RawLayout("Multi30k plain text", (("val.en", "val.de"),)),),
    }
