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


def pack_rows(source_lengths, target_lengths, row_length):
    """The pairs of each row (lists of pair indices), placing the pairs in order, each in the
    first of the last OPEN_ROWS rows where both its sides fit `row_length` positions, else in
    a new row. A pair with a side longer than `row_length` is a ValueError (the pipelines
    leave such pairs out beforehand)."""
    rows, open_rows = [], collections.deque()
    for index, lengths in enumerate(zip(source_lengths, target_lengths)):
        if max(lengths) > row_length:
            raise ValueError(f"pair {index} has {lengths[0]} source and {lengths[1]} target "
                             f"tokens: more than a packed row's {row_length}.")
        row = next((row for row in open_rows
                    if all(used + n <= row_length for used, n in zip(row[1], lengths))), None)
        if row is None:
            row = ([], [0, 0])
            rows.append(row[0])
            open_rows.append(row)
            if len(open_rows) > OPEN_ROWS:
                open_rows.popleft()
        row[0].append(index)
        row[1][0] += lengths[0]
        row[1][1] += lengths[1]
    return rows


def packed_features(rows, pair_at, row_length, row_count=None):
    """{key: int32 [row_count, row_length]} for PACKED_KEYS from `rows` of pair indices
    (`pack_rows`); `pair_at(index)` gives a pair's (source ids, target ids). Rows past
    `len(rows)` (up to `row_count`) are padding."""
    count = len(rows) if row_count is None else row_count
    packed = {key: np.zeros((count, row_length), np.int32) for key in PACKED_KEYS}
    for row_index, pair_indices in enumerate(rows):
        starts = [0, 0]
        for segment, pair_index in enumerate(pair_indices, start=1):
            for side, ids in enumerate(pair_at(pair_index)):
                name = ("inputs", "targets")[side]
                span = slice(starts[side], starts[side] + len(ids))
                packed[name][row_index, span] = ids
                packed[f"{name}_segmentation"][row_index, span] = segment
                packed[f"{name}_position"][row_index, span] = np.arange(len(ids))
                starts[side] += len(ids)
    return packed


def pack_pairs(pairs, row_length):
    """`pairs` of id sequences (source, target) packed into rows: `packed_features` of
    `pack_rows`."""
    pairs = list(pairs)
    rows = pack_rows([len(s) for s, _ in pairs], [len(t) for _, t in pairs], row_length)
    return packed_features(rows, pairs.__getitem__, row_length)
