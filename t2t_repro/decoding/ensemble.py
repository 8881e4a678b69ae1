"""An ensemble of Transformers that decodes as one model: at every position, the log of the
mean of the models' next-token probabilities.

`Ensemble` has the methods of `Transformer` that searching and scoring call (`encode`,
`decode`, `memory_key_values`, `empty_decode_cache`, `reorder_decode_cache`, `decode_step`,
`check_length`, `max_positions`, `variables`), so any search or the scorer takes it in place of
a model. Its "logits" are already log-probabilities (each model's softmax over the whole
vocabulary, averaged), which a log-softmax leaves as they are; so an ensemble of one model
decodes and scores as the model.

The models may differ in everything but their vocabularies. Their encoder outputs travel
through the search as one tensor, side by side on the last axis, and are split again here.
"""

import math

from keras import ops

from t2t_repro.decoding.scoring import output_log_probs
from t2t_repro.errors import ConfigurationError
from t2t_repro.hparams import HParams


def mean_of_probabilities(log_probs):
    """log(mean_m exp(log_probs[m])) of a list of log-probability tensors of one shape."""
    if len(log_probs) == 1:
        return log_probs[0]
    return ops.logsumexp(ops.stack(log_probs), axis=0) - math.log(len(log_probs))


class Ensemble:
    """`models` (built Transformers) decoding together; `names` (default the models' own) name
    them in errors. Models whose source or target vocabulary sizes differ are a
    ConfigurationError naming them."""

    def __init__(self, models, names=None):
        if not models:
            raise ValueError("an ensemble needs at least one model")
        self.models = list(models)
        self.names = list(names) if names is not None else [model.name for model in models]
        first, first_name = self.models[0], self.names[0]
        for model, name in zip(self.models[1:], self.names[1:]):
            for what in ("input_vocab_size", "target_vocab_size"):
                if getattr(model, what) != getattr(first, what):
                    raise ConfigurationError(
                        f"the ensemble's models have different vocabularies: {name} has "
                        f"{what}={getattr(model, what)}, {first_name} has "
                        f"{getattr(first, what)}; ensemble only models trained with one "
                        f"vocabulary.")
        self.input_vocab_size = first.input_vocab_size
        self.target_vocab_size = first.target_vocab_size
        self._widths = [model.hparams.hidden_size for model in self.models]

    @property
    def variables(self):
        return [variable for model in self.models for variable in model.variables]

    @property
    def hparams(self):
        """The first model's hparams with the smallest max_length of all (the decoder's default
        input limit)."""
        return HParams(**{**self.models[0].hparams.values(),
                          "max_length": min(model.hparams.max_length for model in self.models)})

    @property
    def max_positions(self):
        """The fewest positions any model's learned position table has (None: no limit)."""
        limits = [model.max_positions for model in self.models if model.max_positions is not None]
        return min(limits) if limits else None

    def check_length(self, length, what):
        for model in self.models:
            model.check_length(length, what)

    def _split(self, memory):
        """Each model's encoder output from the joined one."""
        parts, start = [], 0
        for width in self._widths:
            parts.append(memory[..., start : start + width])
            start += width
        return parts

    def encode(self, inputs, training=None):
        """Source ids -> (every model's memory joined on the last axis, the memory mask)."""
        encoded = [model.encode(inputs, training=training) for model in self.models]
        memory = ops.concatenate([memory for memory, _ in encoded], axis=-1)
        return memory, encoded[0][1]

    def decode(self, decoder_inputs, memory, memory_mask, training=None):
        """Decoder input ids [batch, t] -> the ensemble's log-probabilities [batch, t, vocab]."""
        return mean_of_probabilities([
            output_log_probs(model.decode(decoder_inputs, part, memory_mask, training=training))
            for model, part in zip(self.models, self._split(memory))])

    def memory_key_values(self, memory):
        return [model.memory_key_values(part)
                for model, part in zip(self.models, self._split(memory))]

    def decoding_projection(self):
        return [model.decoding_projection() for model in self.models]

    def decoding_kernels(self):
        return [model.decoding_kernels() for model in self.models]

    def empty_decode_cache(self, batch_size, max_decode_length, beam_size=1, dtype=None):
        return [model.empty_decode_cache(batch_size, max_decode_length, beam_size, dtype)
                for model in self.models]

    def reorder_decode_cache(self, cache, parent_beams):
        return [model.reorder_decode_cache(model_cache, parent_beams)
                for model, model_cache in zip(self.models, cache)]

    def decode_step(self, ids, position, cache, memory_key_values, memory_mask,
                    output_projection=None, layer_kernels=None):
        """As `Transformer.decode_step`, for every model: (the ensemble's log-probabilities,
        every model's cache)."""
        log_probs, caches = [], []
        none = [None] * len(self.models)
        for model, model_cache, key_values, projection, kernels in zip(
                self.models, cache, memory_key_values, output_projection or none,
                layer_kernels or none):
            logits, model_cache = model.decode_step(ids, position, model_cache, key_values,
                                                    memory_mask, projection, kernels)
            log_probs.append(output_log_probs(logits))
            caches.append(model_cache)
        return mean_of_probabilities(log_probs), caches
