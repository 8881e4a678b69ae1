"""What an importer returns and a run folder is written from: hparams, vocabularies and the
weights in our layout, which `ImportedModel.set_weights` assigns to a built Transformer."""

import dataclasses

import numpy as np

from t2t_repro.errors import UserError


class ModelImportError(UserError, ValueError):
    """A model, vocabulary or option that cannot be imported; the message names the file and
    the problem."""


def check_all_taken(left, source, kind, why):
    """Raises ModelImportError naming (up to five of) `left`, the `kind` ("weights",
    "variables") of `source` that no part of our Transformer took: parts it lacks."""
    if left:
        names = sorted(left)
        raise ModelImportError(f"{source} holds {kind} this import does not know "
                               f"({', '.join(names[:5])}{', ...' if len(names) > 5 else ''}); "
                               f"{why}.")


@dataclasses.dataclass
class ImportedModel:
    """What a run folder is written from: hparams, the vocabularies (rewritten SentencePiece
    models, with the counts of pieces they could not carry over, or tensor2tensor subword
    vocabularies: `vocabulary_format`) and `set_weights(model)`, which fills a built
    Transformer of those hparams."""

    hparams: object
    source_model: object
    target_model: object
    vocabulary_counts: dict
    weights: dict
    description: dict
    vocabulary_format: str = "sentencepiece"

    def set_weights(self, model):
        """Assigns every weight of `model` (a built `Transformer`) from `weights`."""
        assignments = [(model.input_embedding.embeddings, self.weights["source_embedding"])]
        if "logits_bias" in self.weights:
            assignments.append((model.final_logits_bias, self.weights["logits_bias"]))
        if "encoder_input_bias" in self.weights:
            assignments.append((model.encoder_input_bias, self.weights["encoder_input_bias"]))
        if model.target_embedding is not model.input_embedding:
            assignments.append((model.target_embedding.embeddings,
                                self.weights["target_embedding"]))
        if model.softmax_projection is not None:
            assignments.append((model.softmax_projection.kernel, self.weights["output"]))
        for stack, layers in (("encoder", model.encoder_layers),
                              ("decoder", model.decoder_layers)):
            for layer, arrays in zip(layers, self.weights[stack]):
                sublayers = [(layer.self_attention, layer.self_attention_norm)]
                if stack == "decoder":
                    sublayers.append((layer.cross_attention, layer.cross_attention_norm))
                sublayers.append((layer.feed_forward, layer.feed_forward_norm))
                for (sublayer, norm), (projections, norm_arrays) in zip(sublayers, arrays):
                    variables = [variable for dense in _denses(sublayer)
                                 for variable in (dense.kernel, dense.bias)
                                 if variable is not None]
                    assignments += zip(variables + [norm.gamma, norm.beta],
                                       projections + norm_arrays)
        for norm, name in ((model.encoder_final_norm, "encoder_top"),
                           (model.decoder_final_norm, "decoder_top")):
            if norm is not None:
                assignments += zip((norm.gamma, norm.beta), self.weights[name])
        for variable, array in assignments:
            if int(np.prod(variable.shape)) != array.size:
                raise ModelImportError(
                    f"{self.description['model']}: a weight for {variable.path} has shape "
                    f"{array.shape}, where the model's options give {tuple(variable.shape)}.")
            variable.assign(array.reshape(variable.shape))


def _denses(sublayer):
    if hasattr(sublayer, "query_dense"):
        return [sublayer.query_dense, sublayer.key_dense, sublayer.value_dense,
                sublayer.output_dense]
    return [sublayer.inner_dense, sublayer.output_dense]
