"""The hand-worked batching case shared by the tf.data and the NumPy pipelines' tests."""

# Lengths (longer side): 4, 3, 7 (over max_length 6: dropped), 2, 4, 6.
HAND_CHUNK = [
    ([5, 1], [6, 6, 6, 1]),
    ([7, 7, 1], [8, 1]),
    ([9] * 6 + [1], [1]),
    ([4, 1], [4, 1]),
    ([3, 3, 3, 1], [2, 2, 1]),
    ([5, 5, 5, 5, 5, 1], [1]),
]
# Sorted: 2 (ex 3), 3 (ex 1), 4 (ex 0), 4 (ex 4), 6 (ex 5). Budget 8: 2 × 3 = 6 fits, 3 × 4 = 12
# does not; 2 × 4 = 8 fits, 3 × 6 does not; 6 alone. Each side is padded to its own longest row.
HAND_BATCHES = [
    ([[4, 1, 0], [7, 7, 1]], [[4, 1], [8, 1]]),
    ([[5, 1, 0, 0], [3, 3, 3, 1]], [[6, 6, 6, 1], [2, 2, 1, 0]]),
    ([[5, 5, 5, 5, 5, 1]], [[1]]),
]
