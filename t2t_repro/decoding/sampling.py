"""Random sampling of the next token, with tensor2tensor's decode hparams `sampling_method`,
`sampling_temp` and `sampling_keep_top_k`, plus nucleus sampling (`sampling_keep_top_p`,
Holtzman et al. 2020).

Each step's draw is a pure function of a seed tensor [2] and the position, so a search samples
the same tokens whichever loop runs it, and on TensorFlow and JAX alike compiles to one
program with no random state to carry.
"""

import dataclasses

import keras
from keras import ops

from t2t_repro.hparams import HParamsError

SAMPLING_METHODS = ("argmax", "random")
# A finite "excluded" logit, below any real one.
_EXCLUDED = -2e9


@dataclasses.dataclass(frozen=True)
class Sampler:
    """Draws one token per row of logits.

    Args:
        temperature: the logits are divided by it before the softmax (> 0).
        keep_top_k: sample among the k most probable tokens only (0: all).
        keep_top_p: sample among the fewest most probable tokens whose probability (after
            the temperature and top-k) adds up to at least p (1.0: all).
    Tokens tied with the last one kept are kept too. Bad values are an HParamsError naming
    the decode hparam.
    """

    temperature: float = 1.0
    keep_top_k: int = 0
    keep_top_p: float = 1.0

    def __post_init__(self):
        if not self.temperature > 0:
            raise HParamsError(f"sampling_temp must be > 0, got {self.temperature}.")
        if self.keep_top_k < 0:
            raise HParamsError(f"sampling_keep_top_k must be >= 0 (0: all tokens), got "
                             f"{self.keep_top_k}.")
        if not 0 < self.keep_top_p <= 1:
            raise HParamsError(f"sampling_keep_top_p must be in (0, 1] (1: all tokens), got "
                             f"{self.keep_top_p}.")

    def filtered_logits(self, logits, excluded=None):
        """[rows, vocab] float32 logits -> the logits sampled from: tempered, and those of the
        tokens top-k and top-p exclude, and `excluded` (a boolean mask broadcastable to the
        logits: tokens the caller rules out) set to a very low value.

        The logits are shifted so that each row's largest is 0 before the temperature divides
        them: a temperature near 0 then sends the others to -inf (greedy search) instead of
        overflowing. `excluded` stays out however high the temperature, where the caller's own
        very low logits, divided by it, would come back within reach."""
        shifted = logits - ops.max(logits, axis=-1, keepdims=True)
        # 0 / 0 where a temperature below float32's range divides the row's largest.
        logits = ops.where(shifted == 0, 0.0, shifted / self.temperature)
        if excluded is not None:
            logits = ops.where(excluded, _EXCLUDED, logits)
        if self.keep_top_k and self.keep_top_k < ops.shape(logits)[-1]:
            kth = ops.top_k(logits, self.keep_top_k)[0][:, -1:]
            logits = ops.where(logits < kth, _EXCLUDED, logits)
        if self.keep_top_p < 1.0:
            descending = -ops.sort(-logits, axis=-1)
            probabilities = ops.softmax(descending, axis=-1)
            mass_before = ops.cumsum(probabilities, axis=-1) - probabilities
            # The most probable token is always kept; then each while the mass before it < p.
            kept = ops.where(mass_before < self.keep_top_p, descending, ops.max(descending) + 1)
            lowest_kept = ops.min(kept, axis=-1, keepdims=True)
            logits = ops.where(logits < lowest_kept, _EXCLUDED, logits)
        return logits

    def sample(self, logits, seed, excluded=None):
        """[rows] int32 token ids drawn from `filtered_logits(logits, excluded)`; `seed` an
        int32 tensor [2] (see `step_seed`)."""
        ids = keras.random.categorical(self.filtered_logits(logits, excluded), 1,
                                       seed=_keras_seed(seed))
        return ops.cast(ids[:, 0], "int32")


def step_seed(seed, position):
    """The seed of the draw at `position`: `seed` [2] int32 with the position added to its
    second word, so that each step draws independently of the others."""
    return seed + ops.stack([ops.zeros_like(position), position])


def _keras_seed(seed):
    """keras.random's `seed` argument for a seed tensor [2]: JAX takes the tensor itself as a
    key; TensorFlow's stateless ops take it through a SeedGenerator, here one whose `next()`
    is that tensor (and that holds no random state variable)."""
    if keras.backend.backend() == "jax":
        return ops.cast(seed, "uint32")
    return _FixedSeed(seed)


class _FixedSeed(keras.random.SeedGenerator):
    """A SeedGenerator that always gives one seed tensor."""

    def __init__(self, seed):  # no super().__init__(): it would create a state variable
        self._seed = seed

    def next(self, ordered=True):
        return self._seed


def create_sampler(decode_hparams):
    """The Sampler the decode hparams ask for, or None for `sampling_method=argmax`
    (greedy with beam 1, else beam search). Raises HParamsError for an unknown method, or for
    sampling with a beam of more than 1."""
    method = decode_hparams.sampling_method
    if method not in SAMPLING_METHODS:
        raise HParamsError(f"decode hparam sampling_method must be one of {SAMPLING_METHODS}, "
                         f"got '{method}'.")
    if method == "argmax":
        return None
    if decode_hparams.beam_size != 1:
        raise HParamsError(f"sampling_method=random samples one hypothesis per sentence and needs "
                         f"beam_size=1, got beam_size={decode_hparams.beam_size}; add "
                         f"beam_size=1 to --decode_hparams.")
    return Sampler(decode_hparams.sampling_temp, decode_hparams.sampling_keep_top_k,
                   decode_hparams.sampling_keep_top_p)
