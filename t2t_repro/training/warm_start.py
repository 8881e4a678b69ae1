"""Fine-tuning: a new run that starts from another run's weights (tensor2tensor's
--warm_start_from), with a fresh optimizer and step 0.

What may differ from the source run is what only training reads (dropout, the learning rate
and its schedule, the optimizer's constants, batch size, label smoothing, steps, precision);
anything else would change a weight's shape or what the weights compute, and so would a
different vocabulary. Both are errors found before the new run writes anything. A checkpoint
outside any run folder says both itself: the hparams and vocabulary digests stored in it.
"""

import filecmp
import os

import keras

from t2t_repro import hparams as hparams_lib
from t2t_repro.errors import UserError
from t2t_repro.names import FLAGS_FILENAME
from t2t_repro.training import checkpoints, run_records

# The hparams a fine-tuning run may set differently from the run it starts from.
TRAINING_ONLY_HPARAMS = frozenset({
    "layer_prepostprocess_dropout", "attention_dropout", "relu_dropout", "label_smoothing",
    "learning_rate_schedule", "learning_rate_constant", "learning_rate_warmup_steps",
    "optimizer_adam_beta1", "optimizer_adam_beta2", "optimizer_adam_epsilon", "clip_grad_norm",
    "dtype_policy", "batch_size", "gradient_accumulation_steps", "train_steps", "packed",
    "loss_chunk_tokens",
})


class WarmStartError(UserError):
    """The run to start from cannot give this run its weights."""


def source_checkpoint(path):
    """The checkpoint file --warm_start_from names: a file, or the newest checkpoint in a
    folder (a run, its `best/`, avg_checkpoints' output)."""
    if not os.path.exists(path):
        raise WarmStartError(f"--warm_start_from={path} does not exist; name a trained run's "
                             f"folder or one of its checkpoints.")
    return checkpoints.named_checkpoint(path, f"--warm_start_from={path}")


def check_resumed_run_starts_there(output_dir, path):
    """WarmStartError when `output_dir` holds checkpoints of its own, which the run resumes
    from, and its flags.txt does not record --warm_start_from=`path`: those weights did not
    start there, and the flag would be ignored (and then recorded as if it applied)."""
    newest = checkpoints.latest_checkpoint(output_dir)
    recorded = run_records.recorded_flags(output_dir).get("warm_start_from")
    if newest is None or recorded == os.path.abspath(path):
        return
    started = f"started from {recorded}" if recorded else "did not start from another run"
    raise WarmStartError(
        f"--warm_start_from={path}: {output_dir} holds checkpoints of its own (the newest at "
        f"step {checkpoints.checkpoint_step(newest)}), which {started}, and a run resumes from "
        f"its own; leave --warm_start_from out to resume it, or fine-tune into a new "
        f"--output_dir.")


def _unknown(checkpoint, what):
    return WarmStartError(f"no {hparams_lib.HPARAMS_FILENAME} beside {checkpoint} or in the "
                          f"folder above it, and the checkpoint holds no {what} (older "
                          f"checkpoints do not), so what it was trained with is unknown; name "
                          f"a checkpoint of a run the trainer wrote.")


def source_hparams(checkpoint):
    """The hparams of the run `checkpoint` belongs to, or else those stored in it: a
    fine-tuning run without an hparams set of its own takes them (an imported model's are no
    registered set)."""
    run_dir = run_records.run_dir_of(checkpoint)
    hparams = (hparams_lib.load(run_dir) if run_dir is not None
               else checkpoints.stored_hparams(checkpoint))
    if hparams is None:
        raise _unknown(checkpoint, "hparams")
    return hparams


def check_source(checkpoint, problem, hparams):
    """WarmStartError (or ConfigurationError) unless `checkpoint` can give a run of `hparams`
    on `problem` its weights: the same model hparams (`check_hparams`) and the same
    vocabularies (`check_vocabularies` against the files of the run it belongs to; outside a
    run, `check_stored_vocabularies`)."""
    source_dir = run_records.run_dir_of(checkpoint)
    if source_dir is None:
        check_stored_vocabularies(checkpoint, problem)
        # The stored hparams are the model's, as the problem's data adapts them.
        check_hparams(checkpoint, problem.model_hparams(hparams))
        return
    check_hparams(checkpoint, hparams)
    source_problem = run_records.recorded_problem(source_dir)
    if source_problem is None:
        raise WarmStartError(f"{source_dir}/{FLAGS_FILENAME} names no problem, so the "
                             f"vocabulary {checkpoint} was trained with is unknown; name a "
                             f"checkpoint of a run the trainer wrote.")
    source_problem.check_data()  # adopts the data hparams it was generated with
    source_paths = getattr(source_problem, "vocabulary_paths", [])
    paths = getattr(problem, "vocabulary_paths", [])
    if bool(source_paths) != bool(paths):  # one problem's ids are its symbols
        raise WarmStartError(
            f"--warm_start_from={checkpoint} was trained on {_ids(source_problem, source_paths)}"
            f"; this run is {_ids(problem, paths)}. The ids mean different things: start from "
            f"a run encoded with this run's vocabulary.")
    check_vocabularies(source_paths, paths)


def _ids(problem, vocabulary_paths):
    """What `problem`'s ids are, for a message: its vocabulary files' pieces, or its symbols."""
    what = ("its vocabulary " + ", ".join(vocabulary_paths) if vocabulary_paths else
            "its own symbols")
    return f"{problem.name}, whose ids are {what}"


def fixed_hparams(hparams):
    """Names of the hparams that may not differ from the source run's: all but the training
    ones, and max_length too with learned positions (the table's size)."""
    fixed = set(hparams.values()) - TRAINING_ONLY_HPARAMS
    if hparams.position_encoding != "learned":
        fixed.discard("max_length")
    return fixed


def model_hparam_differences(hparams, saved, theirs):
    """`name=<value in hparams> (<theirs> <value in saved>), ...` for each hparam in which
    another run's `saved` hparams differ from `hparams` and would change a weight's shape or
    what the weights compute (`fixed_hparams`); "" when there is none."""
    saved = hparams_lib.with_added_model_hparams(saved, hparams)
    differing = [name for name in hparams.differences(saved) if name in fixed_hparams(hparams)
                 or name not in hparams.values()]
    return hparams_lib.differences_text(hparams, saved, theirs, differing)


def check_hparams(checkpoint, hparams):
    """WarmStartError naming each hparam that differs from the source run's and may not."""
    listed = model_hparam_differences(hparams, source_hparams(checkpoint), "source")
    if listed:
        raise WarmStartError(f"--warm_start_from={checkpoint} was trained with other model "
                             f"hparams: {listed}; only training hparams may differ "
                             f"({', '.join(sorted(TRAINING_ONLY_HPARAMS))}).")


# How: translate_text_files encodes a corpus with given vocabulary files.
ENCODE_WITH_IT = (" (translate_text_files' data hparam vocabulary=<its file>, or "
                  "source_vocabulary= and target_vocabulary=, in a new --data_dir)")


def check_vocabularies(source_vocabularies, vocabularies):
    """WarmStartError naming both files of the first pair whose contents differ: the source
    run's vocabulary files against this run's, in order (one shared file, or the source side's
    and the target side's; none: the problem has no vocabulary file). A shared vocabulary
    against separate ones is an error naming all of them."""
    for path in (*source_vocabularies, *vocabularies):
        if not os.path.exists(path):
            raise WarmStartError(f"cannot compare the vocabularies: {path} is missing; "
                                 f"generate the data (datagen) first.")
    if len(source_vocabularies) != len(vocabularies):
        raise WarmStartError(
            f"the vocabularies differ from the run to start from: "
            f"{', '.join(vocabularies)} against {', '.join(source_vocabularies)}"
            f" (a shared vocabulary is one file, separate source and target ones two); "
            f"fine-tune on data encoded with the run's own{ENCODE_WITH_IT}.")
    for source_vocabulary, vocabulary in zip(source_vocabularies, vocabularies):
        if not filecmp.cmp(source_vocabulary, vocabulary, shallow=False):
            raise WarmStartError(
                f"the vocabulary differs from the run to start from: {vocabulary} is not "
                f"{source_vocabulary}; its embeddings belong to its own vocabulary, so "
                f"fine-tune on data encoded with it{ENCODE_WITH_IT}.")


def check_stored_vocabularies(checkpoint, problem):
    """WarmStartError unless the vocabulary digests stored in `checkpoint` are those of
    `problem`'s files, side by side; a checkpoint without them is refused when `problem` has
    vocabulary files (it may have been trained on any)."""
    digests = checkpoints.vocabulary_digests(problem)
    stored = checkpoints.stored_vocabulary_digests(checkpoint)
    if stored is None and digests:
        raise _unknown(checkpoint, "vocabulary digests")
    differs = checkpoints.vocabulary_difference(stored or {}, problem, digests)
    if differs:
        raise WarmStartError(f"--warm_start_from={checkpoint} was trained with {differs}; its "
                             f"embeddings belong to its own vocabulary, so fine-tune on data "
                             f"encoded with it.")


def load_weights_with_fresh_optimizer(model, checkpoint):
    """The checkpoint's weights in `model`; the optimizer's variables (its step included) keep
    the values they had, so a compiled, unstarted model starts training afresh."""
    optimizer = model.optimizer.variables
    fresh = [keras.ops.convert_to_numpy(variable) for variable in optimizer]
    model.load_weights(checkpoint)
    for variable, value in zip(optimizer, fresh):
        variable.assign(value)
