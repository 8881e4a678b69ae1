"""--random_seed, shared by the trainer (weights, dropout, data order) and the decoder
(sampling), so defined once here."""

from absl import flags

flags.DEFINE_integer("random_seed", None,
                     "Seed: the trainer's weights, dropout and data order; the decoder's "
                     "sampling (sampling_method=random). Default: unseeded.",
                     lower_bound=0, upper_bound=2**32 - 1)  # NumPy's seeds
