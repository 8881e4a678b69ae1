"""The REST server on the toy export (tests/serving/toy_export.py), over real HTTP: servers run
in this process on free ports, plus one `python -m t2t_repro.serve` end to end. Checks TF
Serving's request and response formats, status, metadata, versions, every kind of bad request
(and that the server goes on answering), the model's input limit, merged concurrent requests
with a bad one among them, the full queue, and batching turned off."""

import asyncio
import contextlib
import copy
import dataclasses
import http.client
import json
import logging
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from conftest import HANG_GUARD_S, run_module
from toy_export import MAX_INPUT_BYTES, expected_translation, too_long_error, write_toy_export

from t2t_repro.serving import connections, model_store, rest_api

VERSION = 12
TEXTS = ["A man rides a horse.", "Zwei Hunde spielen im Schnee.", "Grüße aus Zürich", ""]
TOO_LONG = "x" * (MAX_INPUT_BYTES + 1)
# Small limits, so that going past them takes little.
OPTIONS = rest_api.ServerOptions(max_batch_size=8, batch_timeout_micros=1000,
                                 max_instances_per_request=16, max_body_bytes=4096)


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    """Version 12 of the toy model beside an empty version 3 (older, though later as text)
    and an exporter's unfinished `.tmp-<pid>-20` folder (not a version)."""
    directory = tmp_path_factory.mktemp("export")
    write_toy_export(directory, VERSION)
    (directory / "3").mkdir()
    (directory / ".tmp-4242-20").mkdir()
    return directory


@pytest.fixture(scope="module")
def store(export_dir):
    return model_store.ModelStore(model_store.load_latest(str(export_dir), "default"))


@contextlib.contextmanager
def running_server(store, options, app=None):
    """Serves `store` (or `app`) on 127.0.0.1 and a free port in a background thread; yields
    the (host, port) once it accepts connections, and stops it after."""
    sock = rest_api.listening_socket("127.0.0.1", 0)
    ready = threading.Event()
    app = app or rest_api.create_app(store, options)
    server = rest_api.Server(app, options, on_ready=ready.set)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        assert ready.wait(30), "the server did not start"
        yield sock.getsockname()[:2]
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.fixture(scope="module")
def server(store):
    with running_server(store, OPTIONS) as address:
        yield address


class CallRecorder:
    """Wraps a model's predict, recording the texts of each call; `block()` holds every call
    until `release()`."""

    def __init__(self, predict):
        self.predict = predict
        self.calls = []
        self.started = threading.Event()
        self.released = threading.Event()
        self.released.set()

    def __call__(self, signature_name, instances):
        self.calls.append([instance["inputs"].decode() for instance in instances])
        self.started.set()
        assert self.released.wait(30)
        return self.predict(signature_name, instances)

    def block(self):
        self.released.clear()

    def release(self):
        self.released.set()


def recorded_store(store):
    """A store serving the same model, its calls recorded by the CallRecorder returned."""
    model = copy.copy(store.model)
    model.predict = recorder = CallRecorder(store.model.predict)
    return model_store.ModelStore(model), recorder


def send(address, method, path, body=None, headers=None):
    """(status, JSON body, or text when the reply is not JSON)."""
    connection = http.client.HTTPConnection(*address, timeout=60)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        data = response.read()
    finally:
        connection.close()
    if response.getheader("content-type") == "application/json":
        return response.status, json.loads(data)
    return response.status, data.decode()


def predict(address, payload, path="/v1/models/default:predict"):
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return send(address, "POST", path, body, {"Content-Type": "application/json"})


def expected_predictions(texts):
    return [dict(zip(("outputs", "scores"), expected_translation(text))) for text in texts]


def expected_beams(texts):
    beams = []
    for text in texts:
        upper, score = expected_translation(text)
        lower = "".join(char.lower() if char.isascii() else char for char in text)
        beams.append({"outputs": [upper, lower], "scores": [score, score - 1.0]})
    return beams


def test_row_format_plain_values(server):
    assert predict(server, {"instances": TEXTS}) == (
        200, {"predictions": expected_predictions(TEXTS)})


def test_row_format_named_inputs_and_base64(server):
    instances = [{"inputs": "hello"}, {"inputs": {"b64": "d8O2cmxk"}}]  # b64 of "wörld"
    assert predict(server, {"instances": instances}) == (
        200, {"predictions": expected_predictions(["hello", "wörld"])})
    assert predict(server, {"instances": [{"b64": "d8O2cmxk"}]}) == (
        200, {"predictions": expected_predictions(["wörld"])})


@pytest.mark.parametrize("inputs", [TEXTS, {"inputs": TEXTS}])
def test_columnar_format(server, inputs):
    rows = expected_predictions(TEXTS)
    assert predict(server, {"inputs": inputs}) == (200, {"outputs": {
        "outputs": [row["outputs"] for row in rows], "scores": [row["scores"] for row in rows]}})


def test_beams_signature_in_both_formats(server):
    beams = expected_beams(TEXTS)
    assert predict(server, {"signature_name": "beams", "instances": TEXTS}) == (
        200, {"predictions": beams})
    assert predict(server, {"signature_name": "beams", "inputs": TEXTS}) == (200, {"outputs": {
        "outputs": [beam["outputs"] for beam in beams],
        "scores": [beam["scores"] for beam in beams]}})


def test_predict_by_version(server):
    assert predict(server, {"instances": ["abc"]}, f"/v1/models/default/versions/{VERSION}"
                   ":predict") == (200, {"predictions": expected_predictions(["abc"])})
    assert predict(server, {"instances": ["abc"]}, "/v1/models/default/versions/3:predict") == (
        404, {"error": "Servable not found for request: Specific(default, 3)"})
    assert predict(server, {"instances": ["abc"]}, "/v1/models/other:predict") == (
        404, {"error": "Servable not found for request: Latest(other)"})


def test_model_status(server):
    available = {"model_version_status": [{
        "version": str(VERSION), "state": "AVAILABLE",
        "status": {"error_code": "OK", "error_message": ""}}]}
    assert send(server, "GET", "/v1/models/default") == (200, available)
    assert send(server, "GET", f"/v1/models/default/versions/{VERSION}") == (200, available)
    assert send(server, "GET", "/v1/models/default/versions/3") == (
        404, {"error": "Could not find version 3 of model default"})
    assert send(server, "GET", "/v1/models/other") == (
        404, {"error": "Could not find any versions of model other"})


def test_metadata(server):
    status, metadata = send(server, "GET", "/v1/models/default/metadata")
    assert status == 200
    assert metadata["model_spec"] == {"name": "default", "signature_name": "",
                                      "version": str(VERSION)}
    signatures = metadata["metadata"]["signature_def"]["signature_def"]

    def shape(*sizes):
        return {"dim": [{"size": str(size), "name": ""} for size in sizes],
                "unknown_rank": False}

    best, beams = signatures["serving_default"], signatures["beams"]
    assert best["method_name"] == beams["method_name"] == "tensorflow/serving/predict"
    assert best["inputs"]["inputs"] == {"dtype": "DT_STRING", "tensor_shape": shape(-1),
                                        "name": "serving_default_inputs:0"}
    assert {name: (spec["dtype"], spec["tensor_shape"]) for name, spec in
            best["outputs"].items()} == {"outputs": ("DT_STRING", shape(-1)),
                                         "scores": ("DT_FLOAT", shape(-1))}
    assert {name: (spec["dtype"], spec["tensor_shape"]) for name, spec in
            beams["outputs"].items()} == {"outputs": ("DT_STRING", shape(-1, 2)),
                                          "scores": ("DT_FLOAT", shape(-1, 2))}
    assert send(server, "GET", f"/v1/models/default/versions/{VERSION}/metadata") == (
        200, metadata)
    assert send(server, "GET", "/v1/models/default/versions/3/metadata") == (
        404, {"error": "Servable not found for request: Specific(default, 3)"})


@pytest.mark.parametrize("payload, error", [
    (b"", "JSON Parse error: The document is empty"),
    (b'{"instances": ["a"', "JSON Parse error: "),
    (b'{"instances": ["\xff"]}', "JSON Parse error: "),
    (b'["a"]', 'JSON Value: ["a"] Is not object'),
    ({"instances": ["a"], "inputs": ["a"]}, "expecting only one of 'inputs' or 'instances'"),
    ({"signature_name": "serving_default"}, "Missing 'inputs' or 'instances' key"),
    ({"signature_name": 5, "instances": ["a"]}, "'signature_name' key must be a string value"),
    ({"signature_name": "nope", "instances": ["a"]},
     'Serving signature name: "nope" not found in signature def'),
    ({"instances": "a"}, "Expecting 'instances' to be an list/array"),
    ({"instances": []}, "No values in 'instances' array"),
    ({"instances": [1]}, "JSON Value: 1 Type: Number is not of expected type: DT_STRING"),
    ({"instances": [None]}, "Type: Null is not of expected type: DT_STRING"),
    ({"instances": [["a"]]}, 'JSON Value: ["a"] Type: Array is not of expected type'),
    ({"instances": [{"input": "a"}]}, "keys must be equal to: inputs"),
    ({"instances": [{"inputs": "a", "other": "b"}]}, "keys must be equal to: inputs"),
    ({"instances": ["a", {"inputs": "b"}]}, "Expecting value but got object at item 1"),
    ({"instances": [{"b64": "not base64!"}]}, "Unable to base64 decode"),
    ({"instances": ["\ud800"]}, "unpaired surrogate"),
    ({"inputs": {"other": ["a"]}}, "Missing named input: inputs in 'inputs' object."),
    ({"inputs": "a"}, "input 'inputs' takes a non-empty list of strings"),
    ({"inputs": []}, "input 'inputs' takes a non-empty list of strings"),
    ({"inputs": ["a", 2]}, "Failed to process input: inputs of 'inputs'. Error: JSON Value: 2"),
    ({"instances": ["a"] * 17},
     "17 instances in one request, more than this server takes "
     "(--max_instances_per_request=16)"),
])
def test_bad_requests_get_400_and_the_server_goes_on(server, payload, error):
    status, body = predict(server, payload)
    assert status == 400 and error in body["error"], body
    assert predict(server, {"instances": ["ok"]}) == (
        200, {"predictions": expected_predictions(["ok"])})


def test_too_large_bodies_get_400_whether_declared_or_not(server):
    payload = json.dumps({"instances": ["a" * 30] * 200}).encode()  # ~7 KB > 4096
    status, body = predict(server, payload)
    assert status == 400
    assert body["error"] == ("the request body is larger than this server takes "
                             f"(--max_body_bytes=4096): {len(payload)} bytes")
    chunks = (payload[start:start + 1000] for start in range(0, len(payload), 1000))
    status, body = send(server, "POST", "/v1/models/default:predict", chunks)  # chunked
    assert status == 400 and "--max_body_bytes=4096" in body["error"]


@pytest.mark.parametrize("texts, index", [
    (["fine", TOO_LONG], 1),
    # 16 instances, run as two calls of --max_batch_size=8: the input named by its index in
    # the request, not in its call (5).
    ([f"fine {number}" for number in range(13)] + [TOO_LONG, "b", "c"], 13),
])
@pytest.mark.parametrize("key", ["instances", "inputs"])
def test_a_too_long_input_gets_the_models_own_message(server, texts, index, key):
    assert predict(server, {key: texts}) == (
        400, {"error": too_long_error(index, MAX_INPUT_BYTES + 1)})


def test_json_nested_to_the_parsers_limit_gets_400(server):
    """Nesting json.loads takes just under the recursion limit, which the error's preview of
    the value could not re-encode (a 500): a 400 at every depth around the limit."""
    limit = sys.getrecursionlimit()
    for depth in range(limit - 60, limit + 5):
        nested = b"[" * depth + b"]" * depth
        for body, error in ((nested, "Is not object"),
                            (b'{"inputs": ' + nested + b"}", "Failed to process input: inputs"),
                            (b'{"instances": ' + nested + b"}", "Failed to process element: 0")):
            status, reply = predict(server, body)
            assert status == 400, (depth, reply)
            if not reply["error"].startswith("JSON Parse error: maximum recursion depth"):
                assert error in reply["error"], reply
                assert ("[" * 200 + "..." in reply["error"]
                        or rest_api.TOO_DEEP_TO_SHOW in reply["error"]), reply
    assert predict(server, {"instances": ["ok"]})[0] == 200


def test_the_preview_of_a_json_value_never_raises():
    deep = []
    for _ in range(100_000):
        deep = [deep]
    assert rest_api._preview(deep) == "(JSON nested too deeply to show)"
    assert rest_api._preview([[[]]] * 200) == "[" + "[[]]," * 51 + "..."
    assert rest_api._preview({"a": [1, "é", None, True, 1.5, {"b": []}], "c": {}}) == (
        '{"a":[1,"é",null,true,1.5,{"b":[]}],"c":{}}')


def test_other_paths_and_methods(server):
    assert send(server, "GET", "/v1/models")[0] == 404
    assert send(server, "POST", "/v1/models/default")[0] == 405
    assert send(server, "DELETE", "/v1/models/default/metadata")[0] == 405
    assert send(server, "GET", "/v1/models/default/versions/latest")[0] == 404


def concurrently(address, payloads):
    """Each payload posted from its own thread, all released at once; replies in order."""
    barrier = threading.Barrier(len(payloads))
    replies = [None] * len(payloads)

    def post(index):
        barrier.wait()
        replies[index] = predict(address, payloads[index])

    threads = [threading.Thread(target=post, args=(index,)) for index in range(len(payloads))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return replies


@pytest.fixture
def merging_server(store):
    """A server that waits long enough (0.5 s) for concurrent requests to share a call; its
    calls recorded."""
    recorded, recorder = recorded_store(store)
    options = rest_api.ServerOptions(max_batch_size=64, batch_timeout_micros=500_000)
    with running_server(recorded, options) as address:
        yield address, recorder


def test_16_concurrent_requests_share_calls_and_get_their_own_answers(merging_server):
    address, recorder = merging_server
    texts = [[f"sentence {index}"] * (1 + index % 3) for index in range(16)]
    replies = concurrently(address, [{"instances": batch} for batch in texts])
    assert replies == [(200, {"predictions": expected_predictions(batch)}) for batch in texts]
    assert sum(map(len, recorder.calls)) == sum(map(len, texts))
    assert len(recorder.calls) < 16  # merged


def test_a_too_long_input_fails_only_its_own_request_among_concurrent_ones(merging_server):
    address, recorder = merging_server
    texts = [[f"sentence {index}"] for index in range(16)]
    texts[5] = ["fine", TOO_LONG]
    replies = concurrently(address, [{"instances": batch} for batch in texts])
    for index, batch in enumerate(texts):
        if index == 5:
            status, body = replies[index]
            assert status == 400 and f"max_input_tokens={MAX_INPUT_BYTES}" in body["error"]
        else:
            assert replies[index] == (200, {"predictions": expected_predictions(batch)})
    assert any(TOO_LONG in call and len(call) > 2 for call in recorder.calls)  # merged first


def test_a_full_queue_gets_503(store):
    recorded, recorder = recorded_store(store)
    options = rest_api.ServerOptions(batch_timeout_micros=0, max_enqueued_instances=2,
                                     max_instances_per_request=2)
    replies = {}

    def post(name, instances):
        replies[name] = predict(address, {"instances": instances})

    with running_server(recorded, options) as address:
        recorder.block()
        try:
            threads = [threading.Thread(target=post, args=("running", ["a"]))]
            threads[0].start()
            assert recorder.started.wait(30)  # "a" is in the model, the queue empty
            # Two requests for the two places left: whichever comes second finds it full,
            # and gets its answer while the model is still held.
            threads += [threading.Thread(target=post, args=(name, [name, name]))
                        for name in "bc"]
            for thread in threads[1:]:
                thread.start()
            for _ in range(3000):
                if replies:
                    break
                threads[1].join(0.01)
        finally:
            recorder.release()
        for thread in threads:
            thread.join(60)
    [(refused, (status, body))] = [(name, reply) for name, reply in replies.items()
                                   if reply[0] != 200]
    assert status == 503
    assert "The batch scheduling queue to which this task was submitted is full" in body["error"]
    assert refused in "bc" and len(replies) == 3
    assert replies["running"] == (200, {"predictions": expected_predictions(["a"])})


def test_without_batching_each_request_is_a_call_of_its_own(store):
    recorded, recorder = recorded_store(store)
    # Were batching on regardless, these options would merge the requests.
    options = rest_api.ServerOptions(enable_batching=False, max_batch_size=64,
                                     batch_timeout_micros=300_000)
    texts = [["a", "b"], ["c", "d"], ["e", "f"]]
    with running_server(recorded, options) as address:
        replies = concurrently(address, [{"instances": batch} for batch in texts])
    assert replies == [(200, {"predictions": expected_predictions(batch)}) for batch in texts]
    assert sorted(recorder.calls) == texts


def test_float32_outputs_are_written_with_their_shortest_digits():
    assert model_store.json_output(np.array([[0.2, -1.5]], np.float32)) == [[0.2, -1.5]]
    assert model_store.json_output(np.array([b"caf\xc3\xa9"], object)) == ["café"]


def graph_error(function, *args):
    """The message of the InvalidArgumentError that `function(*args)` raises."""
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        function(*args)
    assert "[[{{node" in raised.value.message  # the noise to clean
    return raised.value.message


def test_model_errors_are_cleaned_of_graph_noise():
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def to_number(texts):
        return tf.strings.to_number(texts)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32)])
    def check_lengths(lengths):  # as the exporter checks its inputs
        first = tf.argmax(lengths)
        message = tf.strings.format("input {} has {} tokens, more than this model takes: "
                                    "max_input_tokens=40. Split or shorten it.",
                                    (first, lengths[first]))
        with tf.control_dependencies([tf.debugging.Assert(tf.reduce_all(lengths <= 40),
                                                          [message])]):
            return tf.identity(lengths)

    assert model_store.model_error_text(graph_error(to_number, tf.constant(["1.5", "one"]))) == (
        "StringToNumberOp could not correctly convert string: one")
    assert model_store.model_error_text(graph_error(check_lengths, tf.constant([3, 45]))) == (
        "input 1 has 45 tokens, more than this model takes: max_input_tokens=40. Split or "
        "shorten it.")


def test_no_version_to_serve_says_how_to_export(tmp_path):
    (tmp_path / ".tmp-1-5").mkdir()  # an export being written is no version yet
    for export_dir in (tmp_path / "missing", tmp_path):
        with pytest.raises(model_store.ExportNotFoundError,
                           match=re.escape(str(export_dir)) + ".*python -m t2t_repro.exporter"):
            model_store.load_latest(str(export_dir), "default")


def test_a_version_folder_or_a_ctranslate2_export_is_named_as_such(tmp_path):
    """The two folders a user may take for an export: one of its versions, and the exporter's
    other format; and a version copied in part. Each error says what the folder is and what
    to give instead."""
    version = tmp_path / "export" / "400"
    version.mkdir(parents=True)
    (version / "saved_model.pb").write_bytes(b"")
    with pytest.raises(model_store.ExportNotFoundError) as error:
        model_store.load_latest(str(version), "default")
    assert str(error.value) == (f"{version} is one version of an export (it holds "
                                f"saved_model.pb); give the folder of the versions, "
                                f"--export_dir={tmp_path / 'export'}.")
    converted = tmp_path / "ctranslate2" / "400"
    converted.mkdir(parents=True)
    (converted / "model.bin").write_bytes(b"")
    with pytest.raises(model_store.ExportNotFoundError) as error:
        model_store.load_latest(str(tmp_path / "ctranslate2"), "default")
    assert str(error.value).startswith(f"{converted}, the newest version, holds a CTranslate2 "
                                       f"model (model.bin), which CTranslate2 serves; export one")
    (tmp_path / "export" / "500").mkdir()
    (tmp_path / "export" / "500" / "saved_model.pb").write_bytes(b"")
    with pytest.raises(model_store.ExportNotFoundError) as error:
        model_store.load_latest(str(tmp_path / "export"), "default")
    assert str(error.value) == (f"{tmp_path / 'export' / '500'}, the newest version, holds a "
                                f"SavedModel without its weights (variables/variables.index), "
                                f"as a copy cut short would; export it again.")


def test_a_zero_padded_version_folder_is_loaded_as_named(export_dir, tmp_path):
    """`00300` is version 300, as TF Serving reads it; two folders of the newest number are
    refused, naming both."""
    (tmp_path / "7").mkdir()
    (tmp_path / "00300").symlink_to(export_dir / str(VERSION), target_is_directory=True)
    model = model_store.load_latest(str(tmp_path), "default")
    assert model.version == 300 and "serving_default" in model.signatures
    assert model_store.ModelStore(model).version_status("default", 300)[
        "model_version_status"][0]["version"] == "300"
    (tmp_path / "300").mkdir()
    with pytest.raises(model_store.ExportNotFoundError) as error:
        model_store.load_latest(str(tmp_path), "default")
    assert str(error.value) == (f"{tmp_path / '00300'} and {tmp_path / '300'} are both version "
                                f"300, the newest; remove or renumber all but one of them.")


def read_lines_into(stream, lines):
    """Puts each line of `stream` on the queue `lines`, then None at its end."""
    for line in stream:
        lines.put(line)
    lines.put(None)


def test_serve_command_end_to_end(export_dir):
    """`python -m t2t_repro.serve --port=0` prints its real port once ready, answers a
    request split over calls, and stops cleanly on SIGINT."""
    process = subprocess.Popen(
        [sys.executable, "-m", "t2t_repro.serve", f"--export_dir={export_dir}", "--port=0",
         "--model_name=toy", "--max_batch_size=2"],
        stderr=subprocess.PIPE, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    lines = queue.Queue()
    threading.Thread(target=read_lines_into, args=(process.stderr, lines), daemon=True).start()
    try:
        ready = re.compile(rf"^Serving model toy version {VERSION} at "
                           r"http://127\.0\.0\.1:(\d+)/v1/models/toy$")
        output = []
        while not output or not ready.match(output[-1]):
            line = lines.get(timeout=HANG_GUARD_S)
            assert line is not None, "".join(output)
            output.append(line.rstrip("\n"))
        port = int(ready.match(output[-1]).group(1))
        assert port != 0
        assert predict(("127.0.0.1", port), {"instances": TEXTS}, "/v1/models/toy:predict") == (
            200, {"predictions": expected_predictions(TEXTS)})
    finally:
        process.send_signal(signal.SIGINT)
        returncode = process.wait(30)
    rest = []
    while (line := lines.get(timeout=10)) is not None:
        rest.append(line)
    assert returncode == 0, "".join(rest)
    assert "Traceback" not in "".join(output + rest)


# Hostile and clumsy clients: raw sockets that stall, a connection cap, disconnects mid-way,
# paths and requests the API does not have.

# The limits of the `guarded_server`: small, so that waiting for them takes little.
HEADER_TIMEOUT_S = BODY_TIMEOUT_S = 1.0
# A generous bound on how late a connection past its deadline may be closed: a safety net
# for a busy machine, not a measure of speed.
CLOSE_SLACK_S = 10.0
GOOD_HEADERS = (b"POST /v1/models/default:predict HTTP/1.1\r\nHost: test\r\n"
                b"Content-Type: application/json\r\n")


class LogRecords(logging.Handler):
    """The records uvicorn's error logger (which this server's warnings go to) gets while
    attached."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)

    def messages(self, text=""):
        return [record.getMessage() for record in list(self.records)
                if text in record.getMessage()]


@contextlib.contextmanager
def server_log():
    """LogRecords of the server's warnings and errors (attached once its Config is made:
    uvicorn sets its loggers up anew there)."""
    records = LogRecords()
    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(records)
    try:
        yield records
    finally:
        logger.removeHandler(records)


def wait_for(condition, timeout_s=30.0, what="the condition"):
    """Polls `condition()` until it is true; fails after `timeout_s` (a safety net only)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout_s} s"
        time.sleep(0.02)


def connect(address, data=b""):
    sock = socket.create_connection(address, timeout=60)
    if data:
        sock.sendall(data)
    return sock


def read_until_closed(sock, timeout_s):
    """(what the server sent, seconds until it closed `sock`); fails if it is still open after
    `timeout_s`. A reset counts as closed."""
    start = time.monotonic()
    received = bytearray()
    while True:
        remaining = start + timeout_s - time.monotonic()
        assert remaining > 0, f"still open after {timeout_s} s; received {bytes(received)!r}"
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return bytes(received), time.monotonic() - start
        received += chunk


def http_response(data):
    """(status, headers as a lower-cased dict, body) of a raw HTTP/1.1 response."""
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    return int(status_line.split()[1]), {k.lower(): v for k, v in headers.items()}, body


def read_response(sock):
    """One HTTP/1.1 response (with a Content-Length) read from `sock`, as http_response."""
    data = bytearray()
    while b"\r\n\r\n" not in data or len(http_response(data)[2]) < int(
            http_response(data)[1]["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, f"closed after {bytes(data)!r}"
        data += chunk
    return http_response(bytes(data))


def predict_request(payload):
    body = json.dumps(payload).encode()
    return GOOD_HEADERS + f"Content-Length: {len(body)}\r\n\r\n".encode() + body


@pytest.fixture(scope="module")
def guarded_server(store):
    options = dataclasses.replace(OPTIONS, request_header_timeout_s=HEADER_TIMEOUT_S,
                                  request_body_timeout_s=BODY_TIMEOUT_S, log_interval_s=0)
    with running_server(store, options) as address:
        yield address


def slowloris(sock, stop):
    """Sends a request's headers a byte every 0.2 s until `stop` is set or the server closes
    the connection."""
    for byte in GOOD_HEADERS * 100:
        if stop.wait(0.2):
            return
        try:
            sock.send(bytes([byte]))
        except OSError:
            return


def test_idle_and_half_sent_connections_are_closed_within_their_limits(guarded_server):
    stalled = {
        "idle": connect(guarded_server),
        "part of the headers": connect(guarded_server, GOOD_HEADERS),
        "part of the body": connect(guarded_server, GOOD_HEADERS + b"Content-Length: 100\r\n"
                                    b'\r\n{"instances": ['),
        "a byte at a time": connect(guarded_server),
    }
    stop = threading.Event()
    sender = threading.Thread(target=slowloris, args=(stalled["a byte at a time"], stop))
    sender.start()
    try:
        assert predict(guarded_server, {"instances": ["meanwhile"]}) == (
            200, {"predictions": expected_predictions(["meanwhile"])})
        for kind, sock in stalled.items():
            with sock:
                data, _ = read_until_closed(sock, HEADER_TIMEOUT_S + BODY_TIMEOUT_S +
                                            CLOSE_SLACK_S)
            assert data == b"", kind  # closed, not answered
    finally:
        stop.set()
        sender.join(30)
    assert predict(guarded_server, {"instances": ["after"]})[0] == 200


def test_a_body_past_its_deadline_costs_one_line_of_log(store):
    """The server's close is logged, and not again as a request whose client left."""
    options = dataclasses.replace(OPTIONS, request_body_timeout_s=BODY_TIMEOUT_S,
                                  log_interval_s=0)
    log = LogRecords()
    logger = logging.getLogger("uvicorn.error")
    try:
        with running_server(store, options) as address:
            logger.addHandler(log)
            part = GOOD_HEADERS + b'Content-Length: 100\r\n\r\n{"instanc'
            with connect(address, part) as sock:
                data, _ = read_until_closed(sock, BODY_TIMEOUT_S + CLOSE_SLACK_S)
            assert data == b""
    finally:  # the server has stopped: its requests' tasks have ended and logged all they log
        logger.removeHandler(log)
    [warning] = [record for record in log.records if record.levelno >= logging.WARNING]
    assert "the request's body did not arrive within --request_body_timeout_s=1 s" in (
        warning.getMessage())


def test_a_keep_alive_connection_sending_its_next_headers_slowly_is_closed(guarded_server):
    with connect(guarded_server, predict_request({"instances": ["first"]})) as sock:
        sock.settimeout(60)
        assert read_response(sock)[0] == 200
        sock.sendall(b"GET /v1/models/default HTTP/1.1\r\n")  # and nothing more
        data, _ = read_until_closed(sock, HEADER_TIMEOUT_S + CLOSE_SLACK_S)
    assert data == b""


def test_connections_beyond_the_cap_get_503_while_open_ones_are_answered(store):
    options = dataclasses.replace(OPTIONS, max_connections=3, request_header_timeout_s=60,
                                  request_body_timeout_s=60, log_interval_s=60)
    body = json.dumps({"instances": ["held"]}).encode()
    with running_server(store, options) as address, server_log() as log:
        # Three open: one sending its body, two idle; connections are accepted in order.
        held = connect(address, GOOD_HEADERS + f"Content-Length: {len(body)}\r\n\r\n".encode()
                       + body[:5])
        idle = [connect(address), connect(address)]
        for _ in range(5):
            with connect(address, b"GET /v1/models/default HTTP/1.1\r\nHost: test\r\n\r\n") \
                    as extra:
                data, _ = read_until_closed(extra, 30)
            status, headers, error = http_response(data)
            assert (status, headers["content-type"]) == (503, "application/json")
            assert "--max_connections=3" in json.loads(error)["error"]
        held.sendall(body[5:])
        status, _, answer = read_response(held)
        assert (status, json.loads(answer)) == (
            200, {"predictions": expected_predictions(["held"])})
        # One line for the five refusals: once per interval, not once per connection.
        assert len(log.messages("refused a connection")) == 1
        for sock in [held, *idle]:
            sock.close()
        replies = []
        wait_for(lambda: replies.append(send(address, "GET", "/v1/models/default")) or
                 replies[-1][0] == 200, what="a new connection answered once the others closed")


def test_the_default_connection_cap_keeps_descriptors_free():
    assert connections.most_connections(256) == 128
    assert connections.most_connections(1024) == 1024 - connections.RESERVED_DESCRIPTORS
    assert connections.most_connections(20) == 10
    assert connections.most_connections() < connections.open_file_limit()


def test_a_client_disconnecting_mid_body_costs_one_line_of_log(store):
    options = dataclasses.replace(OPTIONS, log_interval_s=0)
    with running_server(store, options) as address, server_log() as log:
        with connect(address, GOOD_HEADERS + b'Content-Length: 100\r\n\r\n{"instances": ['):
            pass
        wait_for(lambda: log.records, what="a line of log")
        assert predict(address, {"instances": ["ok"]})[0] == 200
    [record] = log.records
    assert record.exc_info is None and "\n" not in record.getMessage()
    assert "dropped the request from 127.0.0.1:" in record.getMessage()
    assert "closed after 15 bytes of its body" in record.getMessage()


def test_a_queued_request_whose_client_left_is_not_run(store):
    recorded, recorder = recorded_store(store)
    options = dataclasses.replace(OPTIONS, batch_timeout_micros=0, log_interval_s=0)
    app = rest_api.create_app(recorded, options)
    replies = []
    with running_server(recorded, options, app) as address, server_log() as log:
        recorder.block()
        try:
            running = threading.Thread(
                target=lambda: replies.append(predict(address, {"instances": ["running"]})))
            running.start()
            assert recorder.started.wait(30)  # the model is busy with "running"
            with connect(address, predict_request({"instances": ["gone", "gone"]})):
                wait_for(lambda: app.state.runner.waiting_instances() == 2,
                         what="the request queued")
            wait_for(lambda: log.messages("dropped the request"), what="the drop logged")
        finally:
            recorder.release()
        running.join(60)
        assert predict(address, {"instances": ["later"]})[0] == 200
    assert replies == [(200, {"predictions": expected_predictions(["running"])})]
    assert recorder.calls == [["running"], ["later"]]
    assert log.messages() == [
        log.messages("dropped the request")[0]]
    assert "client disconnected before the answer was ready" in log.messages()[0]


def test_unknown_paths_wrong_methods_and_non_http_get_json_errors(server):
    assert send(server, "GET", "/v1/models") == (404, {"error": "Not Found: GET /v1/models"})
    assert send(server, "GET", "/v1/models/default/versions/latest") == (
        404, {"error": "Not Found: GET /v1/models/default/versions/latest"})
    assert send(server, "POST", "/v1/models/default") == (
        405, {"error": "Method Not Allowed: POST /v1/models/default"})
    assert send(server, "DELETE", "/v1/models/default/metadata") == (
        405, {"error": "Method Not Allowed: DELETE /v1/models/default/metadata"})
    # The predict path with another method: 405 as with a version, not "Could not find any
    # versions of model default:predict".
    for path in ("/v1/models/default:predict", "/v1/models/default/versions/1:predict"):
        assert send(server, "GET", path) == (405, {"error": f"Method Not Allowed: GET {path}"})
    # A trailing slash: no redirect (to a URL made of the client's Host header).
    for method, path in (("POST", "/v1/models/default:classify"),
                         ("GET", "/v1/models/default:predict/metadata"),
                         ("GET", "/v1/models/default/"), ("POST", "/v1/models/default:predict/"),
                         ("GET", f"/v1/models/default/versions/{VERSION}/metadata/")):
        assert send(server, method, path) == (404, {"error": f"Not Found: {method} {path}"})
    with connect(server, b"NOT HTTP AT ALL\r\n\r\n") as sock:
        data, _ = read_until_closed(sock, 30)
    status, headers, body = http_response(data)
    assert (status, headers["content-type"]) == (400, "application/json")
    assert json.loads(body) == {"error": "Invalid HTTP request received."}


def test_many_connections_that_are_not_http_cost_one_line_of_log(store):
    """uvicorn's own warning for each is throttled as the server's warnings are."""
    options = dataclasses.replace(OPTIONS, log_interval_s=60)
    with running_server(store, options) as address, server_log() as log:
        for _ in range(100):
            with connect(address, b"NOT HTTP AT ALL\r\n\r\n") as sock:
                data, _ = read_until_closed(sock, 30)
            assert http_response(data)[0] == 400
        assert predict(address, {"instances": ["ok"]})[0] == 200
        [line] = log.messages("Invalid HTTP")
    assert re.fullmatch(r"Invalid HTTP request received\. \(client 127\.0\.0\.1:\d+\)", line)


def test_a_version_too_long_for_an_int_is_not_found(server):
    version = "9" * 5000
    shown = "9" * 19 + "...(5000 digits)"
    assert send(server, "GET", f"/v1/models/default/versions/{version}") == (
        404, {"error": f"Could not find version {shown} of model default"})
    assert send(server, "GET", f"/v1/models/default/versions/{version}/metadata") == (
        404, {"error": f"Servable not found for request: Specific(default, {shown})"})
    assert predict(server, {"instances": ["a"]}, f"/v1/models/default/versions/{version}"
                   ":predict")[0] == 404
    assert send(server, "GET", f"/v1/models/default/versions/{'0' * 5000}{VERSION}")[0] == 200


def start_serve(export_dir, flags, open_files):
    """`python -m t2t_repro.serve` on a free port with `open_files` as its open-file limit;
    (process, address, queue of its output lines) once it is ready."""

    command = [sys.executable, "-m", "t2t_repro.serve", f"--export_dir={export_dir}",
               "--port=0", *flags]
    process = subprocess.Popen(
        ["sh", "-c", f'ulimit -Sn {open_files} && exec "$@"', "sh", *command],
        stderr=subprocess.PIPE, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    lines = queue.Queue()
    threading.Thread(target=read_lines_into, args=(process.stderr, lines), daemon=True).start()
    output = []
    while not output or "Serving model" not in output[-1]:
        line = lines.get(timeout=HANG_GUARD_S)
        assert line is not None, "".join(output)
        output.append(line)
    port = int(re.search(r":(\d+)/v1/models/", output[-1]).group(1))
    return process, ("127.0.0.1", port), lines


def test_serve_under_a_low_open_file_limit_and_sigterm_with_a_half_sent_body(export_dir):
    """With `ulimit -n 256` (so at most 128 connections), 200 idle connections are each
    refused or closed at the header deadline, never failing accept(); SIGTERM while a request's
    body is half sent closes it and exits 0 within the grace period."""
    header_timeout_s, grace_s, limit = 2.0, 5.0, 256
    process, address, lines = start_serve(export_dir, [
        f"--request_header_timeout_s={header_timeout_s}", "--request_body_timeout_s=300",
        f"--shutdown_grace_period_s={grace_s}"], open_files=limit)
    try:
        idle = [connect(address) for _ in range(200)]
        refused = 0
        for sock in idle:
            with sock:
                data, _ = read_until_closed(sock, header_timeout_s + CLOSE_SLACK_S)
            if data:
                status, headers, body = http_response(data)
                assert (status, headers["content-type"]) == (503, "application/json")
                assert "--max_connections=128" in json.loads(body)["error"]
                refused += 1
        assert refused <= 200 - connections.most_connections(limit)
        assert predict(address, {"instances": ["after"]})[0] == 200
        with connect(address, GOOD_HEADERS + b"Content-Length: 100\r\n"
                     b"Expect: 100-continue\r\n\r\n") as held:
            assert held.recv(1024).startswith(b"HTTP/1.1 100 ")  # the app reads the body
            held.sendall(b'{"instances": [')
            process.send_signal(signal.SIGTERM)
            data, _ = read_until_closed(held, grace_s + CLOSE_SLACK_S)
        assert data == b""
        returncode = process.wait(grace_s + CLOSE_SLACK_S)
    finally:
        process.kill()
        process.wait()
    output = []
    while (line := lines.get(timeout=10)) is not None:
        output.append(line)
    log = "".join(output)
    assert returncode == 0, log
    assert "Traceback" not in log and "out of system resource" not in log, log
    assert log.count("refused a connection") <= 2, log  # once per 10 s, not per connection


def test_a_server_error_is_json_too(store):
    model = copy.copy(store.model)

    def crash(signature_name, instances):
        raise RuntimeError("a bug")

    model.predict = crash
    with running_server(model_store.ModelStore(model), OPTIONS) as address:
        assert predict(address, {"instances": ["a"]}) == (
            500, {"error": "Internal Server Error"})


OOM_SHAPE = "[3,64,1000000000]"


class MemoryBoundSignature:
    """A served signature that runs out of memory, as TensorFlow reports it, on more than
    `most` instances at once (the real allocation failure would first be retried for 10 s)."""

    def __init__(self, signature, most):
        self.signature = signature
        self.most = most
        self.structured_input_signature = signature.structured_input_signature
        self.structured_outputs = signature.structured_outputs

    def __call__(self, **inputs):
        if len(inputs["inputs"]) > self.most:
            raise tf.errors.ResourceExhaustedError(None, None, (
                f"OOM when allocating tensor with shape{OOM_SHAPE} and type float on "
                "/job:localhost/replica:0/task:0/device:CPU:0 by allocator mklcpu [Op:MatMul]"))
        return self.signature(**inputs)


def memory_bound_store(store, most):
    """A store serving `store`'s model with every signature a MemoryBoundSignature; its calls
    recorded by the CallRecorder returned."""
    model = copy.copy(store.model)
    model.signatures = {name: MemoryBoundSignature(signature, most)
                        for name, signature in store.model.signatures.items()}
    model.predict = recorder = CallRecorder(model.predict)
    return model_store.ModelStore(model), recorder


def out_of_memory_reply(instances, lower):
    return 429, {"error": (
        f"The model ran out of memory on {instances} (OOM when allocating tensor "
        f"with shape{OOM_SHAPE}); send fewer or shorter instances, or serve with a lower "
        f"{lower}.")}


def test_a_merged_call_out_of_memory_is_run_request_by_request(store):
    recorded, recorder = memory_bound_store(store, most=2)
    options = rest_api.ServerOptions(max_batch_size=64, batch_timeout_micros=500_000,
                                     log_interval_s=0)
    texts = [["a", "b"], ["c"], ["d", "e", "f"], ["g", "h"]]
    with running_server(recorded, options) as address, server_log() as log:
        replies = concurrently(address, [{"instances": batch} for batch in texts])
        assert predict(address, {"instances": ["i"]}) == (
            200, {"predictions": expected_predictions(["i"])})
    assert replies[2] == out_of_memory_reply("3 instances", "--max_batch_size (now 64)")
    for index in (0, 1, 3):
        assert replies[index] == (200, {"predictions": expected_predictions(texts[index])})
    assert any(len(call) > 3 for call in recorder.calls)  # merged first
    [record] = log.records
    assert record.getMessage() == replies[2][1]["error"] and record.exc_info is None


def test_a_request_out_of_memory_without_batching_names_the_instances_per_request(store):
    recorded, _ = memory_bound_store(store, most=0)
    options = dataclasses.replace(OPTIONS, enable_batching=False)
    with running_server(recorded, options) as address:
        assert predict(address, {"instances": ["a"]}) == out_of_memory_reply(
            "1 instance", "--max_instances_per_request (now 16)")
        recorded.model.signatures = store.model.signatures
        assert predict(address, {"instances": ["a", "b"]}) == (
            200, {"predictions": expected_predictions(["a", "b"])})


@pytest.mark.parametrize("flag, message", [
    ("--max_connections=1000000000", ("--max_connections=1000000000 is more than the "
                                      "open-file limit allows (ulimit -n: ")),
    ("--request_header_timeout_s=0", ("--request_header_timeout_s=0.0: give a number of "
                                      "seconds more than 0.")),
    ("--request_body_timeout_s=-1", "--request_body_timeout_s=-1.0: give a number"),
    ("--shutdown_grace_period_s=-1", ("--shutdown_grace_period_s=-1.0: give a number of "
                                      "seconds, 0 or more.")),
])
def test_bad_connection_flags_are_one_line_errors(export_dir, flag, message):
    result = run_module("t2t_repro.serve", f"--export_dir={export_dir}", flag)
    assert result.returncode == 1
    assert result.stderr.startswith("error: " + message), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_throttled_warnings_log_the_first_then_a_count_per_interval():
    records = LogRecords()
    logger = logging.getLogger("test_throttled_warnings")
    logger.addHandler(records)
    throttled = connections.ThrottledLog(logger, interval_s=0.2)

    async def warn_and_wait():
        for index in range(4):
            throttled.report("refused", f"refused connection {index}")
        throttled.report("other", "another kind")
        deadline = time.monotonic() + 30
        while len(records.records) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    try:
        asyncio.run(warn_and_wait())
    finally:
        logger.removeHandler(records)
    assert records.messages() == [
        "refused connection 0", "another kind",
        "3 more like this in the last 0.2 s, the latest: refused connection 3"]


def test_a_request_still_running_when_the_grace_period_ends_gets_a_json_503(store):
    recorded, recorder = recorded_store(store)
    options = dataclasses.replace(OPTIONS, shutdown_grace_period_s=0.5)
    sock = rest_api.listening_socket("127.0.0.1", 0)
    ready = threading.Event()
    server = rest_api.Server(rest_api.create_app(recorded, options), options,
                             on_ready=ready.set)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    replies = []
    recorder.block()
    try:
        with server_log() as log:
            thread.start()
            assert ready.wait(30)
            client = threading.Thread(target=lambda: replies.append(
                predict(sock.getsockname()[:2], {"instances": ["slow"]})))
            client.start()
            assert recorder.started.wait(30)  # the model holds the request past any grace
            server.should_exit = True
            client.join(60)
    finally:
        recorder.release()
        thread.join(60)
    assert replies == [(503, {"error": rest_api.SHUTTING_DOWN})]
    assert not [record for record in log.records if record.exc_info]


def test_an_ipv6_address_that_cannot_be_listened_on_is_written_in_brackets(export_dir):
    """Whether the port is taken or the machine has no IPv6: `[::]:PORT`, not `:::PORT`."""
    try:
        taken = rest_api.listening_socket("::", 0)
    except OSError:  # no IPv6 here: binding fails anyway
        taken = socket.socket()
    with taken:
        port = taken.getsockname()[1] if taken.family == socket.AF_INET6 else 8501
        result = run_module("t2t_repro.serve", f"--export_dir={export_dir}", "--host=::",
                            f"--port={port}")
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith(f"error: cannot listen on [::]:{port}: "), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_port_no_socket_takes_is_refused_as_the_flags_are_read(tmp_path):
    """Not an OverflowError from bind() once the export is loaded."""
    result = run_module("t2t_repro.serve", f"--export_dir={tmp_path}", "--port=65536")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "flag --port=65536: 65536 is not" in result.stderr
