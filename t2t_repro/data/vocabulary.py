"""Subword vocabularies: sentencepiece models trained on a problem's text, used in Python and
in-graph.

One model file serves both paths: `SubwordVocabulary.encode` (sentencepiece in Python, for data
generation) and `SubwordVocabulary.graph_tokenizer()` (tensorflow-text's SentencepieceTokenizer,
for the exported model), and they give identical ids.

The models are trained so that `decode(encode(text)) == text`: no normalisation, whitespace
kept as it is, and characters outside the vocabulary spelled as UTF-8 bytes (byte fallback)
instead of mapping to an unknown id. The one exception is U+2581 '▁', sentencepiece's own space
marker, which it reads as a space in any input (`a▁b` comes back as `a b`). Ids 0 and 1 are
padding and end of sequence, as everywhere in t2t_repro (`names`).

All problems use BPE. The paper's word pieces (EN-FR) come from a bottom-up merge procedure, as
BPE does (the merge criterion differs: likelihood gain rather than pair frequency). Sentencepiece's
other algorithm, unigram, breaks ties between equally scored segmentations differently in the
Python package and in tensorflow-text's copy of the library (14 of the 3003 newstest2014 German
lines came out different with an 8k Multi30k model), which would make training and serving disagree.
"""

import sentencepiece

from t2t_repro.utils.atomic_files import atomic_path
from t2t_repro.utils.stderr_lines import SENTENCEPIECE_IDENTITY_NORMALIZATION, lines_dropped
from t2t_repro.names import EOS_ID, PAD_ID
from t2t_repro.errors import UserError

MODEL_TYPE = "bpe"
UNK_ID = 2
_RESERVED_IDS = 3  # padding, EOS, unknown (unused with byte fallback, but sentencepiece needs one)
_BYTE_PIECES = 256
# The fewest ids a trained vocabulary can have: the reserved ones, a piece for every byte (byte
# fallback) and one piece learnt from the text.
MINIMUM_VOCAB_SIZE = _RESERVED_IDS + _BYTE_PIECES + 1
MINIMUM_VOCAB_SIZE_NOTE = f"{_RESERVED_IDS} reserved ids, {_BYTE_PIECES} bytes and a piece"
# Sentencepiece skips training sentences longer than this many bytes; linearised parse trees and
# long WMT sentences exceed its default of 4192.
_MAX_SENTENCE_BYTES = 1 << 16


class VocabularyError(UserError, ValueError):
    """A vocabulary that cannot be trained or loaded; the message says what to change, and
    `reason` what is wrong without the advice (for a caller whose advice differs)."""

    def __init__(self, message, reason=None):
        super().__init__(message)
        self.reason = reason or message


def train_vocabulary(sentences, vocab_size, model_path, split_by_script=True,
                     character_coverage=1.0, size_hparam="vocab_size"):
    """Trains a BPE model of `vocab_size` pieces on `sentences` and writes it to `model_path`.

    Args:
        sentences: a list of strings (a sample of the training text, both languages for a
            shared vocabulary).
        vocab_size: total ids, reserved ones included.
        model_path: the `.model` file to write.
        split_by_script: keep pieces from spanning a change of Unicode script (letters and
            punctuation), sentencepiece's default. Off, a token like `(NP` can be one piece.
        character_coverage: the share of the text's characters that get pieces of their own
            (sentencepiece's); the rarest others are spelled as bytes. Below 1 (0.9995) suits
            scripts with thousands of characters (Chinese, Japanese).
        size_hparam: the data hparam that asked for `vocab_size`, which the errors name.
    Returns the loaded `SubwordVocabulary`.
    """
    if vocab_size < MINIMUM_VOCAB_SIZE:
        raise VocabularyError(
            f"{size_hparam} {vocab_size} is too small: byte fallback alone needs "
            f"{MINIMUM_VOCAB_SIZE} ids ({MINIMUM_VOCAB_SIZE_NOTE}).")
    with atomic_path(model_path) as temporary, open(temporary, "wb") as model_file:
        try:
            sentencepiece.SentencePieceTrainer.train(
                sentence_iterator=iter(sentences),
                model_writer=model_file,
                vocab_size=vocab_size,
                model_type=MODEL_TYPE,
                pad_id=PAD_ID,
                eos_id=EOS_ID,
                unk_id=UNK_ID,
                bos_id=-1,
                byte_fallback=True,
                character_coverage=character_coverage,
                normalization_rule_name="identity",
                remove_extra_whitespaces=False,
                split_by_unicode_script=split_by_script,
                max_sentence_length=_MAX_SENTENCE_BYTES,
                input_sentence_size=0,  # the caller has already sampled
                num_threads=2,
                minloglevel=2,
            )
        except RuntimeError as error:
            raise VocabularyError(_training_failure_message(error, vocab_size, sentences,
                                                            size_hparam)) from None
    return SubwordVocabulary(model_path)


def _training_failure_message(error, vocab_size, sentences, size_hparam):
    """Sentencepiece's reason, and which way to change `size_hparam` (it fails both ways)."""
    reason = str(error)
    flag = f"--data_hparams={size_hparam}=N"
    if "too high" in reason:
        advice = f"Ask for a smaller {size_hparam} ({flag}) or give it more text."
    elif "smaller than required" in reason:
        advice = (f"Ask for a larger {size_hparam} ({flag}): every character of the text needs "
                  f"an id of its own.")
    else:
        advice = f"Check the training text; {flag} changes the size."
    return (f"sentencepiece could not train a {vocab_size}-piece vocabulary on {len(sentences)} "
            f"sentences ({reason}). {advice}")


class SubwordVocabulary:
    """A trained sentencepiece model: text <-> ids in Python, and its in-graph tokenizer."""

    def __init__(self, model_path):
        self.model_path = model_path
        with open(model_path, "rb") as f:
            self.model_proto = f.read()
        try:
            if not self.model_proto:  # loads as no model, which logs a line at each use
                raise RuntimeError("the file is empty")
            self._processor = sentencepiece.SentencePieceProcessor(model_proto=self.model_proto)
            if not self._processor.get_piece_size():
                raise RuntimeError("it has no pieces")
        except RuntimeError as error:  # sentencepiece cannot parse it: damaged or another file
            reason = f"{model_path} is not a readable SentencePiece model ({error})"
            raise VocabularyError(f"{reason}; generate the data again with datagen, or restore "
                                  f"the file from a copy.", reason) from None
        ids = (self._processor.pad_id(), self._processor.eos_id())
        if ids != (PAD_ID, EOS_ID):  # another's model: its ids would be read as ours
            reason = (f"{model_path} puts padding at id {ids[0]} and EOS at id {ids[1]} "
                      f"(sentencepiece's defaults: no padding, EOS at 2), where this project's "
                      f"vocabularies have {PAD_ID} and {EOS_ID}: train it with pad_id={PAD_ID}, "
                      f"eos_id={EOS_ID}, unk_id={UNK_ID}, bos_id=-1")
            raise VocabularyError(f"{reason}, or give a vocabulary datagen wrote.", reason)

    @property
    def vocab_size(self):
        return self._processor.get_piece_size()

    def encode(self, text):
        """Ids of `text` (no EOS); a list of strings gives a list of id lists, encoded in
        parallel."""
        return self._processor.encode(text, num_threads=0)

    def decode(self, ids):
        """Text of `ids`, stopping at the first EOS; padding decodes to nothing."""
        ids = [int(i) for i in ids]
        if EOS_ID in ids:
            ids = ids[: ids.index(EOS_ID)]
        return self._processor.decode(ids)

    def all_pieces(self):
        """Every piece, by id (for the human-readable `.vocab` listing)."""
        return [self._processor.id_to_piece(i) for i in range(self.vocab_size)]

    def graph_tokenizer(self, name=None):
        """tensorflow-text's tokenizer over the same model: strings -> ragged int32 ids.

        `name` scopes the op holding the model. Two tokenizers in one SavedModel need
        different names: a restored op shares its model with any other op of the same name,
        so the second model would silently be the first."""
        import tensorflow as tf
        import tensorflow_text

        with lines_dropped(SENTENCEPIECE_IDENTITY_NORMALIZATION):
            return tensorflow_text.SentencepieceTokenizer(model=self.model_proto,
                                                          out_type=tf.int32, name=name)
