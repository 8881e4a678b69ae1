"""Another toolkit's vocabulary as SentencePiece models whose ids are this project's.

Marian (and so OPUS-MT) tokenizes with a SentencePiece model, then looks each piece up in a
vocabulary of its own (`vocab.yml`: `</s>` 0, `<unk>` 1, then the pieces; a piece it does not
list reads as `<unk>`). Every id here has one fixed meaning (`names`: 0 padding, 1 `</s>`,
2 `<unk>`), so the import does not carry Marian's ids: it rewrites each side's SentencePiece
model so that its own ids are ours, `<pad>` first and then the vocabulary in Marian's order
(our id = Marian's id + 1), each piece keeping its model's score and type. The rewritten file
is then an ordinary vocabulary of `translate_text_files`: datagen, the decoder, the exporter
(tensorflow-text in the graph), CTranslate2 and fine-tuning read it as they read their own.

A vocabulary piece that the side's model lacks (the other language's, in a joint vocabulary)
is kept for its id: an unused piece in a unigram model (never produced by encoding, decoded as
its text), a control piece in a BPE model (BPE would merge through an unused piece and change
the segmentation; a control piece decodes as nothing). A piece of the model that the
vocabulary lacks is left out: SentencePiece then segments around it, where Marian would read
the piece as `<unk>` (the import counts such pieces).
"""

import os

import yaml
from sentencepiece import sentencepiece_model_pb2

from t2t_repro.errors import UserError
from t2t_repro.names import EOS_ID, PAD_ID

PAD_PIECE, EOS_PIECE, UNK_PIECE = "<pad>", "</s>", "<unk>"
_UNK_ID = 2
# Marian's fixed ids of end of sentence and unknown; every other id is ours minus one.
MARIAN_SPECIAL_PIECES = (EOS_PIECE, UNK_PIECE)

_Piece = sentencepiece_model_pb2.ModelProto.SentencePiece
_UNIGRAM = sentencepiece_model_pb2.TrainerSpec.UNIGRAM


class VocabularyImportError(UserError, ValueError):
    """A vocabulary or SentencePiece file that cannot be imported; the message names it."""


def read_marian_vocabulary(path):
    """The pieces of a Marian `.yml` vocabulary in id order (a mapping piece -> id, ids 0 to
    n - 1, `</s>` 0 and `<unk>` 1). Read with YAML's base loader, which keeps every key a
    string (a piece such as `null` or `1` stays that piece)."""
    if not path.endswith((".yml", ".yaml")):
        raise VocabularyImportError(
            f"{path} is not a Marian .yml vocabulary; this import reads those (SentencePiece "
            f"'.spm' vocabularies and factored ones are not supported).")
    try:
        with open(path, encoding="utf-8") as f:
            entries = yaml.load(f, Loader=getattr(yaml, "CBaseLoader", yaml.BaseLoader))
        ids = {piece: int(value) for piece, value in entries.items()}
    except FileNotFoundError:
        raise VocabularyImportError(f"vocabulary {path} is missing.") from None
    except (yaml.YAMLError, AttributeError, TypeError, ValueError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise VocabularyImportError(f"{path} is not a Marian vocabulary (a YAML mapping of "
                                    f"pieces to ids): {reason}.") from None
    pieces = sorted(ids, key=ids.get)
    if sorted(ids.values()) != list(range(len(ids))):
        raise VocabularyImportError(f"{path}: the ids are not 0 to {len(ids) - 1}, each once.")
    if tuple(pieces[:2]) != MARIAN_SPECIAL_PIECES:
        raise VocabularyImportError(f"{path}: Marian's vocabularies give </s> id 0 and <unk> "
                                    f"id 1; this one has {pieces[:2]}.")
    if PAD_PIECE in ids:
        raise VocabularyImportError(f"{path} lists {PAD_PIECE} (id {ids[PAD_PIECE]}), the piece "
                                    f"this import adds as id 0 for padding.")
    return pieces


def read_sentencepiece_model(path):
    """The `ModelProto` of a SentencePiece model file."""
    model = sentencepiece_model_pb2.ModelProto()
    try:
        with open(path, "rb") as f:
            model.ParseFromString(f.read())
    except FileNotFoundError:
        raise VocabularyImportError(f"SentencePiece model {path} is missing.") from None
    except Exception as error:  # protobuf's DecodeError is not exported by a stable name
        raise VocabularyImportError(f"{path} is not a SentencePiece model ({error}).") from None
    if not model.pieces:
        raise VocabularyImportError(f"{path} is not a SentencePiece model (it has no pieces).")
    return model


def rewritten_model(model, marian_pieces):
    """`model` (a ModelProto) with the pieces `[<pad>, </s>, <unk>, *marian_pieces[2:]]` in
    that order, so that its id i is our id i; returns `(ModelProto, counts)`, the counts of
    the vocabulary's pieces missing from the model and of the model's missing from the
    vocabulary (module docstring)."""
    own = {piece.piece: piece for piece in model.pieces}
    foreign_type = _Piece.UNUSED if model.trainer_spec.model_type == _UNIGRAM else _Piece.CONTROL
    rewritten = sentencepiece_model_pb2.ModelProto()
    rewritten.CopyFrom(model)
    del rewritten.pieces[:]
    for text, piece_type in ((PAD_PIECE, _Piece.CONTROL), (EOS_PIECE, _Piece.CONTROL),
                             (UNK_PIECE, _Piece.UNKNOWN)):
        rewritten.pieces.add(piece=text, score=0.0, type=piece_type)
    missing = 0
    for text in marian_pieces[len(MARIAN_SPECIAL_PIECES):]:
        piece = own.get(text)
        if piece is None:
            missing += 1
            rewritten.pieces.add(piece=text, score=0.0, type=foreign_type)
        elif piece.type in (_Piece.CONTROL, _Piece.UNKNOWN):  # the model's <s> and the like
            rewritten.pieces.add(piece=text, score=0.0, type=_Piece.CONTROL)
        else:
            rewritten.pieces.add(piece=text, score=piece.score, type=piece.type)
    listed = set(marian_pieces)
    unlisted = [piece for piece in model.pieces if piece.piece not in listed and
                piece.type not in (_Piece.CONTROL, _Piece.UNKNOWN)]
    spec = rewritten.trainer_spec
    spec.pad_id, spec.eos_id, spec.unk_id, spec.bos_id = PAD_ID, EOS_ID, _UNK_ID, -1
    spec.pad_piece, spec.eos_piece, spec.unk_piece = PAD_PIECE, EOS_PIECE, UNK_PIECE
    spec.vocab_size = len(rewritten.pieces)
    return rewritten, {"vocabulary_pieces_not_in_model": missing,
                       "model_pieces_not_in_vocabulary": len(unlisted)}


def write_model(model, path):
    """Writes a ModelProto to `path` (a folder being assembled; the caller renames it)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
