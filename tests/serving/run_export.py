"""Runs exported models the way a serving process would, importing only TensorFlow and
TensorFlow Text: `python run_export.py` answers each line of its stdin, a JSON object
{"export": EXPORT_VERSION_DIR, "request": ...} whose request is a list of input texts or an
object {"inputs": [...], "targets": [...], "failing_pairs": [[input, target], ...]} of as many
input and target texts, with one line of JSON: each signature's outputs and input/output specs
(the `score` signature's on the (input, target) pairs, when targets are given), the error of
each input given alone where it fails, the `score` signature's error on each failing pair, and
which modules of this project got imported (none should). One process answers a test
worker's every request (`conftest.export_runner`): TensorFlow is imported once."""

import gc
import json
import sys

# Started as the commands start (`cli.quiet_tensorflow`), without importing them: a serving
# process has no JAX, which TensorFlow's import would otherwise import where it is installed,
# and what the import makes lives as long as the process, so it is frozen, not collected again
# and again (together, 2 s of the process's start).
sys.modules["jax"] = None
gc.disable()
import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: F401,E402  (registers the sentencepiece ops)

gc.freeze()
gc.enable()


def specs(signature):
    _, inputs = signature.structured_input_signature
    return {"inputs": {name: [spec.dtype.name, spec.shape.as_list()]
                       for name, spec in inputs.items()},
            "outputs": {name: [spec.dtype.name, spec.shape.as_list()]
                        for name, spec in signature.structured_outputs.items()}}


def answer(signature, texts):
    outputs = signature(inputs=tf.constant(texts, tf.string))
    return {"outputs": [[text.decode("utf-8") for text in row] if isinstance(row, list)
                        else row.decode("utf-8") for row in outputs["outputs"].numpy().tolist()],
            "scores": outputs["scores"].numpy().tolist()}


def scores(signature, texts, targets):
    outputs = signature(inputs=tf.constant(texts, tf.string),
                        targets=tf.constant(targets, tf.string))
    return {name: outputs[name].numpy().tolist() for name in ("scores", "lengths")}


def main():
    for line in sys.stdin:
        query = json.loads(line)
        print(json.dumps(answers(query["export"], query["request"])), flush=True)


def answers(version_dir, request):
    texts = request["inputs"] if isinstance(request, dict) else request
    targets = request.get("targets") if isinstance(request, dict) else None
    model = tf.saved_model.load(version_dir)
    result = {"signatures": {}, "errors": {}}
    good = []
    for index, text in enumerate(texts):
        try:
            model.signatures["serving_default"](inputs=tf.constant([text]))
            good.append(index)
        except tf.errors.InvalidArgumentError as error:
            result["errors"][text] = error.message
    for name, signature in model.signatures.items():
        if name == "score":
            if targets is not None:
                result["signatures"][name] = {
                    "specs": specs(signature),
                    **scores(signature, [texts[i] for i in good], [targets[i] for i in good])}
            continue
        result["signatures"][name] = {"specs": specs(signature),
                                      **answer(signature, [texts[i] for i in good])}
    result["score_errors"] = []
    for text, target in request.get("failing_pairs", []) if isinstance(request, dict) else ():
        try:
            scores(model.signatures["score"], [text], [target])
        except tf.errors.InvalidArgumentError as error:
            result["score_errors"].append(error.message)
    result["inputs"] = [texts[i] for i in good]
    result["project_modules"] = sorted(
        name for name in sys.modules if name.split(".")[0] in ("t2t_repro", "problems", "hparams"))
    return result


if __name__ == "__main__":
    main()
