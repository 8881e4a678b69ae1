"""Subword vocabularies: exact round trips, Python ids = in-graph ids, reserved ids, training."""

import re

import pytest
import tensorflow as tf

from t2t_repro.data.vocabulary import SubwordVocabulary, VocabularyError, train_vocabulary
from t2t_repro.names import EOS_ID, PAD_ID

LANGUAGES = ("en", "de")
# Layout every model shares: padding, EOS, unknown, then the 256 byte pieces <0x00>..<0xFF>.
FIRST_BYTE_ID = 3
UNK_ID = 2

ODD_STRINGS = [
    "",
    " ",
    "   ",
    " leading space",
    "trailing space ",
    "double  space  inside",
    "  both ends  ",
    "\t",
    "tab\tseparated\tcolumns",
    "\ttab at both ends\t",
    "line\nbreak",
    "carriage\r\nreturn",
    "no\u00a0break space",
    "emoji 😀 and a family 👨\u200d👩\u200d👧",
    "漢字とカタカナのテスト",
    "Ελληνικά και русский",
    "combining e\u0301 vs precomposed é",
    "ligature ﬁ and fullwidth Ａ",
    "zero\u200bwidth and \ufeffBOM",
    "a NUL \x00 byte",
    "looks like control pieces: <pad> </s> <unk> <0x41>",
    "x" * 3000,
]


def lines_by_hand(path):
    """A file's lines split on "\\n" only, the way the corpora are laid out (see data README)."""
    return path.read_bytes().decode("utf-8").removesuffix("\n").split("\n")


@pytest.fixture(scope="module")
def vocab(ende_data_dir):
    return SubwordVocabulary(str(ende_data_dir / "translate_ende.spm.model"))


@pytest.fixture(scope="module")
def newstest2014(shared_data_dir):
    lines = {lang: lines_by_hand(shared_data_dir / "wmt14_ende" / f"newstest2014.{lang}")
             for lang in LANGUAGES}
    assert len(lines["en"]) == len(lines["de"]) == 3003
    return lines


@pytest.fixture(scope="module")
def multi30k_characters(shared_data_dir):
    """Every character of the Multi30k training text the session vocabulary was trained on."""
    folder = shared_data_dir / "multi30k_ende"
    return set((folder / "train.en").read_text("utf-8")) | set(
        (folder / "train.de").read_text("utf-8")
    )


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_newstest2014_line_round_trips_exactly(vocab, newstest2014, lang):
    """decode(encode(line)) == line for all 3003 newstest2014 lines (text unseen in training)."""
    lines = newstest2014[lang]
    ids = vocab.encode(lines)
    assert len(ids) == len(lines)
    mismatches = [(line, vocab.decode(line_ids)) for line, line_ids in zip(lines, ids)
                  if vocab.decode(line_ids) != line]
    assert mismatches == []


@pytest.mark.parametrize("text", ODD_STRINGS, ids=lambda text: ascii(text)[:32])
def test_odd_strings_round_trip_exactly(vocab, text):
    """Whitespace runs, tabs, emoji, CJK, control characters and "" come back as they were."""
    assert vocab.decode(vocab.encode(text)) == text


def test_empty_string_encodes_to_no_ids(vocab):
    """The empty string has no pieces at all (EOS is added by the problem, not the vocabulary)."""
    assert vocab.encode("") == []
    assert vocab.decode([]) == ""


def test_byte_pieces_follow_the_reserved_ids(vocab):
    """Ids 0, 1 are <pad>, </s>; byte b is the piece <0xBB> at id 3 + b; 8000 pieces in all."""
    pieces = vocab.all_pieces()
    assert vocab.vocab_size == len(pieces) == 8000
    assert pieces[PAD_ID] == "<pad>" and pieces[EOS_ID] == "</s>"
    assert pieces[FIRST_BYTE_ID : FIRST_BYTE_ID + 256] == [f"<0x{b:02X}>" for b in range(256)]


@pytest.mark.parametrize(
    "text", ["5€ for ø3", "£ © ½", "漢字", "😀", "naïve façade — “quoted”…"]
)
def test_characters_absent_from_multi30k_are_spelled_as_utf8_bytes(
    vocab, multi30k_characters, text
):
    """Characters the vocabulary never saw become their UTF-8 bytes (ids 3 + byte), in order."""
    absent = [c for c in text if c not in multi30k_characters]
    assert absent, "the case must contain a character Multi30k lacks"
    expected_byte_ids = [FIRST_BYTE_ID + b for c in absent for b in c.encode("utf-8")]
    ids = vocab.encode(text)
    assert [i for i in ids if FIRST_BYTE_ID <= i < FIRST_BYTE_ID + 256] == expected_byte_ids
    assert vocab.decode(ids) == text


@pytest.mark.parametrize("text", ["a\u2581b", "\u2581", "block \u2581\u2582\u2583 chars"])
def test_the_whitespace_meta_symbol_comes_back_as_a_space(vocab, text):
    """The documented exception: sentencepiece reads its meta symbol U+2581 as a space."""
    assert vocab.decode(vocab.encode(text)) == text.replace("\u2581", " ")


@pytest.mark.parametrize("lang", LANGUAGES)
def test_python_ids_equal_in_graph_ids_on_newstest2014(vocab, newstest2014, lang):
    """tensorflow-text's tokenizer gives the Python ids for every newstest2014 line."""
    lines = newstest2014[lang]
    graph_ids = vocab.graph_tokenizer().tokenize(tf.constant(lines))
    assert graph_ids.dtype == tf.int32
    assert graph_ids.to_list() == vocab.encode(lines)


@pytest.mark.parametrize("lang", LANGUAGES)
def test_python_ids_equal_in_graph_ids_inside_a_dataset_map(vocab, newstest2014, lang):
    """Tokenizing batches of lines in a tf.data map (as a pipeline does) gives the Python ids."""
    lines = newstest2014[lang]
    tokenizer = vocab.graph_tokenizer()
    dataset = tf.data.Dataset.from_tensor_slices(lines).batch(128).map(tokenizer.tokenize)
    graph_ids = [row for batch in dataset for row in batch.to_list()]
    assert graph_ids == vocab.encode(lines)


def test_a_graph_tokenizer_is_built_without_sentencepieces_normalization_notice(vocab, capfd):
    """tensorflow-text's sentencepiece prints an INFO line to file descriptor 2 for a model
    trained without normalisation, as ours are; building the tokenizer keeps it off stderr and
    nothing else."""
    capfd.readouterr()
    vocab.graph_tokenizer()
    assert capfd.readouterr().err == ""


def test_python_ids_equal_in_graph_ids_on_odd_strings(vocab):
    """The two tokenizers agree on whitespace runs, bytes fallback and the empty string too."""
    assert vocab.graph_tokenizer().tokenize(tf.constant(ODD_STRINGS)).to_list() == vocab.encode(
        ODD_STRINGS
    )


@pytest.mark.parametrize("lang", LANGUAGES)
def test_text_never_encodes_to_padding_eos_or_unknown(vocab, newstest2014, lang):
    """No newstest2014 line uses ids 0 (padding), 1 (EOS) or 2 (unknown: byte fallback's job)."""
    used = {i for line_ids in vocab.encode(newstest2014[lang]) for i in line_ids}
    assert used.isdisjoint({PAD_ID, EOS_ID, UNK_ID})
    assert max(used) < vocab.vocab_size


def test_odd_strings_never_encode_to_padding_eos_or_unknown(vocab):
    """Not even text spelling '<pad>' or '</s>', control characters or unseen scripts."""
    used = {i for line_ids in vocab.encode(ODD_STRINGS) for i in line_ids}
    assert used.isdisjoint({PAD_ID, EOS_ID, UNK_ID})


@pytest.mark.parametrize("suffix, case", [
    ([EOS_ID], "EOS at the end"),
    ([EOS_ID, "other"], "text after EOS is ignored"),
    ([EOS_ID, PAD_ID, PAD_ID], "EOS then padding"),
    ([PAD_ID, PAD_ID, PAD_ID], "padding without EOS"),
    ([PAD_ID, EOS_ID, "other", PAD_ID], "padding, EOS, more text"),
])
def test_decode_stops_at_eos_and_ignores_padding(vocab, suffix, case):
    """Hand cases: 'A dog runs.' then EOS / padding / more text decodes to 'A dog runs.'."""
    other = vocab.encode("A cat.")
    ids = vocab.encode("A dog runs.")
    ids = ids + [i for token in suffix for i in (other if token == "other" else [token])]
    assert vocab.decode(ids) == "A dog runs."


def test_decode_of_a_padded_numpy_row(vocab):
    """A row of an int32 batch (numpy scalars) decodes like a list of ints."""
    row = tf.constant([vocab.encode("Zwei Hunde spielen.") + [EOS_ID, PAD_ID, PAD_ID]]).numpy()[0]
    assert vocab.decode(row) == "Zwei Hunde spielen."


@pytest.mark.parametrize("ids", [[EOS_ID], [PAD_ID, PAD_ID], [EOS_ID, 500, 600], []])
def test_decode_of_nothing_but_special_ids_is_empty(vocab, ids):
    """A sequence that starts with EOS, or holds only padding, is the empty string."""
    assert vocab.decode(ids) == ""


@pytest.mark.parametrize("kept", [1000, 0], ids=["cut short", "empty"])
def test_a_damaged_model_file_is_a_vocabulary_error_naming_it(vocab, tmp_path, kept, capfd):
    """A user error (one line from every command), not sentencepiece's RuntimeError, nor a
    line sentencepiece's library logs."""
    damaged = tmp_path / "translate_ende.spm.model"
    damaged.write_bytes(vocab.model_proto[:kept])
    capfd.readouterr()
    with pytest.raises(VocabularyError) as raised:
        SubwordVocabulary(str(damaged))
    assert capfd.readouterr().err == ""
    message = str(raised.value)
    assert message.startswith(f"{damaged} is not a readable SentencePiece model (")
    assert message.endswith("); generate the data again with datagen, or restore the file from "
                            "a copy.") and "\n" not in message


# --- Training ----------------------------------------------------------------------------------

TINY_CORPUS = ["the cat sat on the mat", "a dog ran in the park", "the cat and the dog"]


def smallest_trainable_size(sentences):
    """Reserved ids + 256 bytes + one piece per distinct character (spaces become '▁')."""
    characters = set("".join(sentences).replace(" ", "\u2581")) | {"\u2581"}
    return 3 + 256 + len(characters)


def test_smallest_trainable_size_by_hand():
    """The tiny corpus has 15 distinct letters plus '▁': 3 + 256 + 16 = 275."""
    assert smallest_trainable_size(TINY_CORPUS) == 275


@pytest.mark.parametrize("vocab_size", [275, 290, 300])
def test_train_vocabulary_gives_exactly_vocab_size_pieces(tmp_path, vocab_size):
    """A tiny corpus trains a model of exactly `vocab_size` distinct pieces that round-trips it."""
    model_path = tmp_path / "tiny.model"
    trained = train_vocabulary(TINY_CORPUS, vocab_size, str(model_path))
    assert trained.vocab_size == vocab_size
    pieces = trained.all_pieces()
    assert len(pieces) == len(set(pieces)) == vocab_size
    reloaded = SubwordVocabulary(str(model_path))
    assert reloaded.all_pieces() == pieces
    for sentence in TINY_CORPUS:
        ids = reloaded.encode(sentence)
        assert all(FIRST_BYTE_ID + 256 <= i < vocab_size for i in ids)  # no byte fallback needed
        assert reloaded.decode(ids) == sentence


@pytest.mark.parametrize("vocab_size", [1, 100, 258, 259])
def test_vocab_size_below_the_byte_fallback_minimum_is_refused(tmp_path, vocab_size):
    """Fewer than 3 reserved + 256 byte + 1 ids raises VocabularyError naming the minimum, 260."""
    with pytest.raises(VocabularyError, match=rf"vocab_size {vocab_size} .*needs 260 ids"):
        train_vocabulary(TINY_CORPUS, vocab_size, str(tmp_path / "tiny.model"))


def test_vocab_size_below_the_corpus_characters_raises_vocabulary_error(tmp_path):
    """274, one short of the corpus's 275 required pieces, raises VocabularyError."""
    with pytest.raises(VocabularyError, match="274"):
        train_vocabulary(TINY_CORPUS, 274, str(tmp_path / "tiny.model"))


def test_too_small_for_the_characters_says_to_ask_for_a_larger_vocab_size(tmp_path):
    """Below the corpus's character count the advice is a larger vocab_size, never a smaller one."""
    with pytest.raises(VocabularyError) as raised:
        train_vocabulary(TINY_CORPUS, 274, str(tmp_path / "tiny.model"))
    assert "smaller vocab_size" not in str(raised.value)


def test_the_errors_name_the_data_hparam_that_asked_for_the_size(tmp_path):
    """A side's own size (a separate vocabulary's target_vocab_size) is the one to change."""
    with pytest.raises(VocabularyError, match=r"^target_vocab_size 259 is too small"):
        train_vocabulary(TINY_CORPUS, 259, str(tmp_path / "tiny.model"),
                         size_hparam="target_vocab_size")
    with pytest.raises(VocabularyError) as raised:
        train_vocabulary(TINY_CORPUS, 8000, str(tmp_path / "tiny.model"),
                         size_hparam="target_vocab_size")
    assert str(raised.value).endswith("Ask for a smaller target_vocab_size (--data_hparams="
                                      "target_vocab_size=N) or give it more text.")


@pytest.mark.parametrize("vocab_size", [400, 8000])
def test_vocab_size_beyond_what_the_text_supports_says_to_ask_for_less(tmp_path, vocab_size):
    """Three sentences cannot fill 400 pieces: VocabularyError saying to ask for a smaller
    vocab_size; the largest size it reports does train, one more does not."""
    with pytest.raises(VocabularyError, match="Ask for a smaller vocab_size") as raised:
        train_vocabulary(TINY_CORPUS, vocab_size, str(tmp_path / "tiny.model"))
    largest = re.search(r"<= (\d+)", str(raised.value))
    assert largest, f"sentencepiece's bound is missing from: {raised.value}"
    largest = int(largest.group(1))
    assert smallest_trainable_size(TINY_CORPUS) < largest < 400
    trained = train_vocabulary(TINY_CORPUS, largest, str(tmp_path / "largest.model"))
    assert trained.vocab_size == largest
    with pytest.raises(VocabularyError, match="Ask for a smaller vocab_size"):
        train_vocabulary(TINY_CORPUS, largest + 1, str(tmp_path / "one_more.model"))
