"""Keras layers of the Transformer, written with keras.ops only so they run on any backend."""

from t2t_repro.layers.attention import (
    MultiHeadAttention,
    restricted_attention,
    scaled_dot_product_attention,
)
from t2t_repro.layers.embedding import SharedEmbedding
from t2t_repro.layers.feed_forward import PositionwiseFeedForward
from t2t_repro.layers.masks import band_mask, causal_mask, padding_mask, same_segment_mask
from t2t_repro.layers.positional import (
    LearnedPositionEmbedding,
    SinusoidalPositionEncoding,
    sinusoidal_position_encoding,
)
from t2t_repro.layers.transformer_layers import TransformerDecoderLayer, TransformerEncoderLayer
