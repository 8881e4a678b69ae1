"""Packing sentence pairs end to end into fixed-length rows (tensor2tensor's `_packed` problems).

Bucketing by length still pads each row to its longest pair, and a source and its target rarely
have the same length; a packed row wastes only its tail. Each pair in a row gets a segment id
(1, 2, ... within the row; 0 marks padding) and positions that restart at 0, which the model
uses (`models.transformer.PACKING_FEATURES`) so that no attention, position or loss crosses
from one pair to the next.
"""

import collections

import numpy as np

PACKED_KEYS = ("inputs", "inputs_segmentation", "inputs_position", "targets",
               "targets_segmentation", "targets_position")
# Open rows a pair may join: first fit over a bounded window keeps packing linear in the pairs.
OPEN_ROWS = 64


class _Row:
    def __init__(self):
        self.pairs = []
        self.source_length = self.target_length = 0

    def fits(self, source, target, row_length):
        return (self.source_length + len(source) <= row_length
                and self.target_length + len(target) <= row_length)

    def add(self, source, target):
        self.pairs.append((source, target))
        self.source_length += len(source)
        self.target_length += len(target)


def pack_pairs(pairs, row_length):
    """Packs `pairs` of id sequences (source, target), in order, first fit over the last
    OPEN_ROWS rows, into rows of `row_length` positions on each side.

    Returns {key: int32 array [rows, row_length]} for PACKED_KEYS. A pair with a side longer
    than `row_length` is a ValueError (the pipeline leaves such pairs out beforehand).
    """
    open_rows, rows = collections.deque(), []
    for index, (source, target) in enumerate(pairs):
        if max(len(source), len(target)) > row_length:
            raise ValueError(f"pair {index} has {len(source)} source and {len(target)} target "
                             f"tokens: more than a packed row's {row_length}.")
        row = next((row for row in open_rows if row.fits(source, target, row_length)), None)
        if row is None:
            row = _Row()
            rows.append(row)
            open_rows.append(row)
            if len(open_rows) > OPEN_ROWS:
                open_rows.popleft()
        row.add(source, target)
    packed = {key: np.zeros((len(rows), row_length), np.int32) for key in PACKED_KEYS}
    for row_index, row in enumerate(rows):
        for side, column in (("inputs", 0), ("targets", 1)):
            start = 0
            for segment, pair in enumerate(row.pairs, start=1):
                ids = pair[column]
                span = slice(start, start + len(ids))
                packed[side][row_index, span] = ids
                packed[f"{side}_segmentation"][row_index, span] = segment
                packed[f"{side}_position"][row_index, span] = np.arange(len(ids))
                start += len(ids)
    return packed

