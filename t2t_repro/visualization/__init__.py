"""Pictures of a model: its attention weights on a sentence (`attention`, drawn by `figures` into
the PNG files `plots` writes for `python -m t2t_repro.visualize`, tiled into TensorBoard images
by `training.attention_images`), the positional encoding and the learning-rate schedule."""
