"""t2t_repro: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017) in Keras 3."""

__version__ = "0.1.0"
