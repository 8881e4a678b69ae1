"""A problem's text <-> ids inside a TensorFlow graph, for exported models: the same ids and
texts as the problem's Python `encode` / `decode`, so a SavedModel takes and returns text with
nothing of this package at serving time.

`encode` gives ragged ids without EOS (the exporter appends it, as `Problem.encode` does);
`decode` reads ids [..., length] up to the first EOS, skipping padding.
"""

import tensorflow as tf

from t2t_repro.names import EOS_ID, PAD_ID


def texts_of_ids(ids, texts_of_rows):
    """`texts_of_rows(ragged [rows, (n)]) -> [rows]` applied to each row of `ids` [..., length]
    cut before its first EOS, padding dropped; returns texts shaped `ids` less its last axis."""
    before_eos = tf.math.cumsum(tf.cast(ids == EOS_ID, tf.int32), axis=-1, exclusive=True) == 0
    rows = tf.reshape(ids, [-1, tf.shape(ids)[-1]])
    keep = tf.reshape(before_eos & (ids != EOS_ID) & (ids != PAD_ID), tf.shape(rows))
    return tf.reshape(texts_of_rows(tf.ragged.boolean_mask(rows, keep)), tf.shape(ids)[:-1])


class SubwordGraphText(tf.Module):
    """tensorflow-text's SentencepieceTokenizer over a problem's sentencepiece models: the
    source one encodes, the target one decodes (one object when the vocabulary is shared). The
    models' bytes are held in the graph, as an attribute of tensorflow-text's op; each model
    file is also tracked as a SavedModel asset, so the export carries the vocabularies as files
    too, for people and other tools."""

    def __init__(self, source_vocabulary, target_vocabulary):
        super().__init__(name="subword_text")
        self.source_tokenizer = source_vocabulary.graph_tokenizer("source_sentencepiece")
        self.source_vocabulary_file = tf.saved_model.Asset(source_vocabulary.model_path)
        if target_vocabulary is source_vocabulary:
            self.target_tokenizer = self.source_tokenizer
        else:
            self.target_tokenizer = target_vocabulary.graph_tokenizer("target_sentencepiece")
            self.target_vocabulary_file = tf.saved_model.Asset(target_vocabulary.model_path)

    def encode(self, texts):
        return self.source_tokenizer.tokenize(texts)

    def encode_target(self, texts):
        """Target texts -> ragged ids (no EOS), with the target model (a translation to score)."""
        return self.target_tokenizer.tokenize(texts)

    def decode(self, ids):
        return texts_of_ids(ids, self._detokenize)

    def _detokenize(self, ids):
        """tensorflow-text's detokenize with the leading spaces Python's sentencepiece keeps:
        it drops every leading '▁' (`▁ ▁ ▁a` -> "a"), Python only the first (-> "  a")."""
        pieces = tf.strings.reduce_join(self.target_tokenizer.id_to_string(ids), axis=-1)
        leading = tf.strings.regex_replace(pieces, "^(▁*).*$", r"\1")
        spaces = tf.strings.regex_replace(tf.strings.regex_replace(leading, "^▁", ""), "▁", " ")
        return spaces + self.target_tokenizer.detokenize(ids)


class SymbolGraphText(tf.Module):
    """Space-separated symbols 0..num_symbols-1 as ids `symbol + first_id` (the algorithmic
    problems). A token that is not such a symbol fails the call with the accepted range named."""

    def __init__(self, num_symbols, first_id, problem_name):
        super().__init__(name="symbol_text")
        self.num_symbols = num_symbols
        self.first_id = first_id
        self.problem_name = problem_name

    def encode(self, texts):
        tokens = tf.strings.split(texts)
        digits = tf.strings.regex_full_match(tokens.flat_values, "[0-9]{1,9}")
        values = tf.where(digits, tf.strings.to_number(
            tf.where(digits, tokens.flat_values, "0"), tf.int32), -1)
        valid = tf.reduce_all((values >= 0) & (values < self.num_symbols))
        checked = tf.debugging.Assert(valid, [
            f"{self.problem_name} accepts only the symbols 0..{self.num_symbols - 1} separated "
            f"by spaces; got", tf.boolean_mask(tokens.flat_values,
                                               (values < 0) | (values >= self.num_symbols)),
        ])
        with tf.control_dependencies([checked]):
            return tokens.with_flat_values(values + self.first_id)

    def encode_target(self, texts):
        """Targets are the same symbols as sources."""
        return self.encode(texts)

    def decode(self, ids):
        return texts_of_ids(ids, self._symbols_text)

    def _symbols_text(self, ids):
        symbols = tf.ragged.boolean_mask(ids, ids >= self.first_id) - self.first_id
        return tf.strings.reduce_join(tf.strings.as_string(symbols), axis=1, separator=" ")
