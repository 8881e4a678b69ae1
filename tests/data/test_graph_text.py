"""The in-graph text codecs an export runs (`Problem.graph_text`) against the problems' Python
`encode`/`decode`: the same ids from the same text, the same text from the same ids, on real
data for translation and parsing and on the symbols of the algorithmic problems."""

import numpy as np
import pytest
import tensorflow as tf

from problems.algorithmic import AlgorithmicReverse
from problems.parsing_wsj import ParsingWsj
from problems.translate_ende import TranslateEnde
from t2t_repro.names import EOS_ID

# Byte fallback (a character outside the vocabulary), sentencepiece's own space marker, runs
# of spaces, tabs, and an empty line.
HARD_CASES = ["Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich.",
              "emoji 🙂 and 漢字", "a▁b", "  two  spaces ", "tab\there", "", "   ", " \u00a0x",
              "▁ leading marker"]


def graph_ids(problem, texts):
    return problem.graph_text().encode(tf.constant(texts)).to_list()


def graph_texts(problem, id_rows):
    texts = problem.graph_text().decode(tf.constant(id_rows, tf.int32)).numpy()
    return [text.decode("utf-8") for text in texts]


def assert_round_trips_as_in_python(problem, texts, seed):
    """Graph encode equals Python encode (less EOS); graph decode of random id rows (with EOS
    somewhere and padding after) equals Python decode, bytes that are invalid UTF-8 included."""
    assert graph_ids(problem, texts) == [problem.encode(text)[:-1] for text in texts]
    encoded = [problem.encode(text) for text in texts]
    width = max(map(len, encoded))
    padded = np.array([ids + [0] * (width - len(ids)) for ids in encoded], np.int32)
    assert graph_texts(problem, padded) == [problem.decode(ids) for ids in encoded]
    rng = np.random.default_rng(seed)
    rows = rng.integers(2, problem.target_vocab_size, size=(64, 12)).astype(np.int32)
    rows[rng.random(rows.shape) < 0.1] = EOS_ID
    rows[:, -2:] = 0
    assert graph_texts(problem, rows) == [problem.decode(row) for row in rows]
    # [batch, beam, length] keeps its leading axes.
    assert problem.graph_text().decode(tf.constant(rows.reshape(16, 4, 12))).shape == (16, 4)


def test_translation_codec_equals_python(ende_data_dir, shared_data_dir):
    problem = TranslateEnde(str(ende_data_dir))
    lines = (shared_data_dir / "wmt14_ende" / "newstest2014.de").read_text(
        encoding="utf-8").splitlines()[:500]
    assert_round_trips_as_in_python(problem, lines + HARD_CASES, seed=1)


def test_parsing_codec_equals_python(shared_data_dir, tmp_path):
    problem = ParsingWsj(str(tmp_path), "vocab_size=2000,train_sections=01,eval_sections=00,"
                                        "num_train_shards=1")
    problem.generate_data(str(shared_data_dir / "ptb_sample" / "combined_mrg"), download=False)
    trees = [problem.decode(example["targets"]) for example in
             problem.examples("eval").take(200).as_numpy_iterator()]
    assert trees[0].startswith("(")
    assert_round_trips_as_in_python(problem, trees + HARD_CASES, seed=2)


def test_symbol_codec_equals_python():
    problem = AlgorithmicReverse()
    texts = ["3 1 4", " 0  9 ", "", "7"]
    assert graph_ids(problem, texts) == [problem.encode(text)[:-1] for text in texts]
    assert_round_trips_as_in_python(problem, texts, seed=3)


@pytest.mark.parametrize("text", ["3 x 4", "10", "-1", "1.5"])
def test_symbol_codec_rejects_what_python_rejects_naming_the_symbols(text):
    with pytest.raises(tf.errors.InvalidArgumentError, match="accepts only the symbols 0..9"):
        graph_ids(AlgorithmicReverse(), [text])
