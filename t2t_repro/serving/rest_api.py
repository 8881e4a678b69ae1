"""TF Serving's REST API (https://www.tensorflow.org/tfx/serving/api_rest) over a ModelStore,
as a starlette app served by uvicorn.

    GET  /v1/models/NAME[/versions/N]             the version's status
    GET  /v1/models/NAME[/versions/N]/metadata    its signature defs
    POST /v1/models/NAME[/versions/N]:predict     {"instances": [...]} (row format) or
                                                  {"inputs": ...} (columnar), string inputs

Errors are `{"error": TEXT}` with TF Serving's status and, where it has one, its text: 400 for
a request the server or the model cannot take (or that is not HTTP), 404 for a model, version
or path not served, 405 for a method a path does not take, 503 when the batching queue is
full or the server has --max_connections open. Request bodies are only ever parsed as JSON.
Slow, idle and surplus connections are handled as serving/connections.py says; a request
whose client disconnects is dropped with one line of log, and not run if it is still queued.
"""

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import json
import signal
import socket

import uvicorn
from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.routing import Route

from t2t_repro.names import BEST_SIGNATURE
from t2t_repro.serving import connections
from t2t_repro.serving.model_store import (ModelInputError, ModelOutOfMemoryError,
                                           ServableNotFoundError)
from t2t_repro.serving.request_batching import (BatchingOptions, QueueFullError, RequestBatcher,
                                                UnbatchedRunner)

# TF Serving cuts JSON it echoes in an error at 256 bytes.
PREVIEW_CHARS = 256
TOO_DEEP_TO_SHOW = "(JSON nested too deeply to show)"
SHUTTING_DOWN = ("The server is shutting down and its grace period (--shutdown_grace_period_s) "
                 "ended before this request was answered; retry it.")


@dataclasses.dataclass(frozen=True)
class ServerOptions:
    """The serve command's flags that shape how requests are taken and run."""

    enable_batching: bool = True
    max_batch_size: int = 32
    batch_timeout_micros: int = 5000
    max_enqueued_instances: int = 1024
    max_instances_per_request: int = 256
    max_body_bytes: int = 1 << 20
    request_header_timeout_s: float = 10.0
    request_body_timeout_s: float = 60.0
    max_connections: int = dataclasses.field(default_factory=connections.most_connections)
    shutdown_grace_period_s: float = 10.0
    log_interval_s: float = 10.0  # the least time between two warnings of one kind


class RequestError(Exception):
    """A request answered with `{"error": message}` and `status`."""

    def __init__(self, message, status=400):
        super().__init__(message)
        self.status = status


class ClientGone(Exception):
    """The client disconnected before its request was read or answered; the message says
    when."""


@dataclasses.dataclass(frozen=True)
class PredictRequest:
    signature_name: str
    instances: list  # {input name: bytes} each
    row_format: bool  # "instances" (answered as "predictions") or "inputs" (as "outputs")


def json_response(content, status=200, headers=None):
    # NaN and infinities written as TF Serving's JSON writer writes them, not refused; text
    # that cannot be UTF-8 (a lone surrogate echoed from a request) replaced, not a crash.
    body = json.dumps(content, ensure_ascii=False).encode("utf-8", errors="replace")
    return Response(body, status_code=status, headers=headers, media_type="application/json")


def _preview(value):
    """`value` as compact JSON, cut at PREVIEW_CHARS. json.loads takes nesting just past what
    json.dumps can write again: such a value is named, never a RecursionError (a 500)."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except RecursionError:
        return TOO_DEEP_TO_SHOW
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "..."


def _json_type(value):
    """rapidjson's name for the type of `value`, as TF Serving's messages give it."""
    if isinstance(value, bool):
        return str(value)
    return {dict: "Object", list: "Array", str: "String", type(None): "Null"}.get(
        type(value), "Number")


def _is_base64_object(value):
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


def _is_named_instance(value):
    return isinstance(value, dict) and not _is_base64_object(value)


def _string_value(value):
    """A string input's bytes: JSON text as UTF-8, or `{"b64": ...}` decoded."""
    if _is_base64_object(value):
        try:
            return base64.b64decode(value["b64"], validate=True)
        except binascii.Error:
            raise RequestError("Unable to base64 decode") from None
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError:
            raise RequestError(f"JSON Value: {_preview(value)} is not valid Unicode text (it "
                               f"has an unpaired surrogate escape)") from None
    raise RequestError(f"JSON Value: {_preview(value)} Type: {_json_type(value)} is not of "
                       f"expected type: DT_STRING")


async def read_body(request, max_bytes):
    """The request's body; a RequestError when its declared or actual size is over
    `max_bytes`, found before more than that is read."""
    too_large = f"the request body is larger than this server takes (--max_body_bytes={max_bytes})"
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and len(declared) < 20 and int(declared) > max_bytes:
        raise RequestError(f"{too_large}: {declared} bytes")
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_bytes:
                raise RequestError(too_large)
    except ClientDisconnect:
        raise ClientGone(f"its connection closed after {len(body)} bytes of its body") from None
    return bytes(body)


async def _disconnected(request):
    """Returns once the client of `request` (whose body is read) has disconnected."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_client_leaves(request, awaitable):
    """`awaitable`'s result; ClientGone, with `awaitable` cancelled, when the client
    disconnects first: a request still queued for the model is then dropped, not run."""
    work = asyncio.ensure_future(awaitable)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (work, gone):
            if not task.done():
                task.cancel()
    if work.done() and not work.cancelled():
        return work.result()
    raise ClientGone("its client disconnected before the answer was ready")


class VersionConvertor(Convertor):
    """A version in a path: digits, as an int where it can be one (TF Serving's are int64),
    else a short text that no served version equals (so: 404, not int()'s ValueError)."""

    regex = "[0-9]+"

    def convert(self, value):
        digits = value.lstrip("0") or "0"
        return int(digits) if len(digits) <= 19 else f"{digits[:19]}...({len(digits)} digits)"

    def to_string(self, value):
        return str(value)


register_url_convertor("t2t_version", VersionConvertor())


class ModelNameConvertor(Convertor):
    """A model's name in a path: up to the next `/` or `:`, so that `m:predict` is model m's
    predict method (a GET of it: 405) rather than a model named "m:predict" (404)."""

    regex = "[^/:]+"

    def convert(self, value):
        return value

    def to_string(self, value):
        return value


register_url_convertor("t2t_model_name", ModelNameConvertor())


def _parse_json_object(body):
    if not body:
        raise RequestError("JSON Parse error: The document is empty")
    try:
        payload = json.loads(body)
    except json.JSONDecodeError as error:
        raise RequestError(f"JSON Parse error: {error.msg} at offset: {error.pos}") from None
    except (ValueError, RecursionError) as error:  # bytes not UTF-8, nesting too deep
        raise RequestError(f"JSON Parse error: {error}") from None
    if not isinstance(payload, dict):
        raise RequestError(f"JSON Value: {_preview(payload)} Is not object")
    return payload


def _row_instances(instances, input_names):
    """`{"instances": [...]}`: a list of values (one input), or of {input name: value}."""
    if not isinstance(instances, list):
        raise RequestError(f"JSON Value: {_preview(instances)} Expecting 'instances' to be an "
                           f"list/array")
    if not instances:
        raise RequestError("No values in 'instances' array")
    named = _is_named_instance(instances[0])
    if not named and len(input_names) > 1:
        raise RequestError("instances is a plain list, but expecting list of objects as "
                           "multiple input tensors required as per tensorinfo_map")
    parsed = []
    for index, instance in enumerate(instances):
        if _is_named_instance(instance) != named:
            expected, got = ("object", "value") if named else ("value", "object")
            raise RequestError(f"Expecting {expected} but got {got} at item {index} of "
                               f"'instances' list")
        values = instance if named else {input_names[0]: instance}
        if sorted(values) != input_names:
            raise RequestError(f"Failed to process element: {index} of 'instances' list. JSON "
                               f"object: {_preview(instance)} keys must be equal to: "
                               f"{','.join(input_names)}")
        try:
            parsed.append({name: _string_value(value) for name, value in values.items()})
        except RequestError as error:
            raise RequestError(f"Failed to process element: {index} of 'instances' list. "
                               f"Error: {error}") from None
    return parsed


def _columnar_instances(inputs, input_names):
    """`{"inputs": [...]}` (one input) or `{"inputs": {input name: [...]}}`, lists of equal
    length, as one instance per position."""
    if _is_named_instance(inputs):
        missing = [name for name in input_names if name not in inputs]
        if missing:
            raise RequestError(f"Missing named input: {missing[0]} in 'inputs' object.")
        columns = {name: inputs[name] for name in input_names}
    elif len(input_names) > 1:
        raise RequestError("inputs is a plain value/list, but expecting an object as multiple "
                           "input tensors required as per tensorinfo_map")
    else:
        columns = {input_names[0]: inputs}
    parsed = {}
    for name, column in columns.items():
        if not isinstance(column, list) or not column:
            raise RequestError(f"JSON Value: {_preview(column)} input '{name}' takes a "
                               f"non-empty list of strings (shape [-1])")
        try:
            parsed[name] = [_string_value(value) for value in column]
        except RequestError as error:
            raise RequestError(f"Failed to process input: {name} of 'inputs'. Error: "
                               f"{error}") from None
    sizes = {name: len(values) for name, values in parsed.items()}
    if len(set(sizes.values())) > 1:
        raise RequestError(f"Expecting the same number of values for every input, got {sizes}")
    count = len(parsed[input_names[0]])
    return [{name: parsed[name][index] for name in input_names} for index in range(count)]


def parse_predict_request(body, model, max_instances):
    """A predict request's signature and instances, checked against `model`'s signatures;
    RequestError (TF Serving's text where it has one) for anything else."""
    payload = _parse_json_object(body)
    signature_name = payload.get("signature_name", BEST_SIGNATURE)
    if not isinstance(signature_name, str):
        raise RequestError(f"JSON Value: {_preview(payload)} not formatted correctly. "
                           f"'signature_name' key must be a string value.")
    signature_name = signature_name or BEST_SIGNATURE
    if signature_name not in model.signatures:
        raise RequestError(f"Serving signature name: {json.dumps(signature_name)} not found "
                           f"in signature def")
    input_names = model.input_names(signature_name)
    if "instances" in payload and "inputs" in payload:
        raise RequestError("Not formatted correctly expecting only one of 'inputs' or "
                           "'instances' keys to exist")
    if "instances" in payload:
        instances = _row_instances(payload["instances"], input_names)
    elif "inputs" in payload:
        instances = _columnar_instances(payload["inputs"], input_names)
    else:
        raise RequestError("Missing 'inputs' or 'instances' key")
    if len(instances) > max_instances:
        raise RequestError(f"{len(instances)} instances in one request, more than this server "
                           f"takes (--max_instances_per_request={max_instances}); split it")
    return PredictRequest(signature_name, instances, "instances" in payload)


def predict_response(results, output_names, row_format):
    """Row format: one prediction per instance, a value when the signature has one output,
    else {output name: value}. Columnar: each output's values as a list (one output) or
    {output name: list}."""
    single = output_names[0] if len(output_names) == 1 else None
    if row_format:
        return {"predictions": [result[single] for result in results] if single else results}
    columns = {name: [result[name] for result in results] for name in output_names}
    return {"outputs": columns[single] if single else columns}


def _in_request(error, offset):
    """A model's error of a call on a request's instances from `offset` on, as the request sees
    it (the batcher splits a request of more than --max_batch_size instances)."""
    return error.in_request(offset) if isinstance(error, ModelInputError) else error


def create_app(store, options=ServerOptions()):
    """The starlette app answering TF Serving's REST API for `store`'s model."""
    if options.enable_batching:
        runner = RequestBatcher(
            store.model.predict,
            BatchingOptions(options.max_batch_size, options.batch_timeout_micros / 1e6,
                            options.max_enqueued_instances),
            request_errors=(ModelInputError, ModelOutOfMemoryError),
            in_request=_in_request)
        lower = f"--max_batch_size (now {options.max_batch_size})"
    else:
        runner = UnbatchedRunner(store.model.predict)
        lower = f"--max_instances_per_request (now {options.max_instances_per_request})"
    events = connections.ThrottledLog(interval_s=options.log_interval_s)

    def version_of(request):
        return request.path_params.get("version")

    async def model_status(request):
        return json_response(store.version_status(request.path_params["name"],
                                                  version_of(request)))

    async def model_metadata(request):
        model = store.find(request.path_params["name"], version_of(request))
        return json_response({
            "model_spec": {"name": model.name, "signature_name": "",
                           "version": str(model.version)},
            "metadata": {"signature_def": {"signature_def": model.signature_defs}},
        })

    async def predict(request):
        model = store.find(request.path_params["name"], version_of(request))
        body = await read_body(request, options.max_body_bytes)
        parsed = parse_predict_request(body, model, options.max_instances_per_request)
        try:
            results = await unless_client_leaves(
                request, runner.submit(parsed.signature_name, parsed.instances))
        except ModelInputError as error:
            raise RequestError(str(error)) from None
        except ModelOutOfMemoryError as error:
            message = f"{error}; send fewer or shorter instances, or serve with a lower {lower}."
            events.report("out_of_memory", message)
            raise RequestError(message, status=429) from None  # TF Serving's RESOURCE_EXHAUSTED
        except QueueFullError as error:
            raise RequestError(str(error), status=503) from None
        except asyncio.CancelledError:
            # Only uvicorn cancels a request: its shutdown's grace period is over. Answered,
            # rather than left to uvicorn's traceback and plain-text 500; the task ends anyway.
            raise RequestError(SHUTTING_DOWN, status=503) from None
        return json_response(predict_response(results, model.output_names(parsed.signature_name),
                                              parsed.row_format))

    async def request_error(request, error):
        return json_response({"error": str(error)}, error.status)

    async def not_found(request, error):
        return json_response({"error": str(error)}, 404)

    async def http_error(request, error):
        """Starlette's 404 and 405 (paths and methods not served) as JSON."""
        where = f"{request.method} {request.url.path}"
        where = where if len(where) <= PREVIEW_CHARS else where[:PREVIEW_CHARS] + "..."
        return json_response({"error": f"{error.detail}: {where}"}, error.status_code,
                             headers=error.headers)

    async def internal_error(request, error):
        return json_response({"error": "Internal Server Error"}, 500)

    async def client_gone(request, error):
        if not request.scope.get(connections.CLOSED_BY_SERVER):  # else its close was logged
            client = request.client
            peer = f"{client.host}:{client.port}" if client else "a client"
            events.report("client_gone", f"dropped the request from {peer} "
                          f"({request.method} {request.url.path}): {error}")
        return Response(status_code=400)  # not sent: there is no one to send it to

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        # Off the event loop: requests cancelled at the end of the grace period are answered
        # while the running model call finishes.
        await asyncio.to_thread(runner.close)

    routes = []
    for prefix in ("/v1/models/{name:t2t_model_name}",
                   "/v1/models/{name:t2t_model_name}/versions/{version:t2t_version}"):
        routes += [Route(prefix, model_status, methods=["GET"]),
                   Route(prefix + "/metadata", model_metadata, methods=["GET"]),
                   Route(prefix + ":predict", predict, methods=["POST"])]
    app = Starlette(routes=routes, lifespan=lifespan,
                     exception_handlers={RequestError: request_error,
                                         ServableNotFoundError: not_found,
                                         ClientGone: client_gone, HTTPException: http_error,
                                         Exception: internal_error})
    # A path with a trailing slash is not served: the JSON 404, not starlette's redirect to a
    # URL made of the client's Host header.
    app.router.redirect_slashes = False
    app.state.runner = runner  # for tests: what waits for the model
    return app


def listening_socket(host, port):
    """A TCP socket listening on `host`:`port` (0: a free port), IPv6 when `host` is.

    Made with protocol IPPROTO_TCP, not `socket.create_server`'s 0: asyncio sets TCP_NODELAY
    only on sockets that say they are TCP, and without it every keep-alive response waited
    ~40 ms for the client's delayed acknowledgement."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen()
    except OSError:
        sock.close()
        raise
    return sock


def host_port(host, port):
    """`host:port` as a URL writes it: an IPv6 host in brackets (`[::]:8501`)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def base_url(host, port):
    return f"http://{host_port(host, port)}"


class Server(uvicorn.Server):
    """uvicorn serving `app` with warnings and errors logged, no access log, and `options`'
    connection limits (serving/connections.py); `on_ready()` is called once it accepts
    connections. `run(sockets=[listening_socket(...)])` serves until SIGINT/SIGTERM or
    `should_exit`, then answers the complete requests it holds for at most
    `options.shutdown_grace_period_s`. After SIGTERM `run` returns (exit status 0); after
    SIGINT it raises KeyboardInterrupt, as uvicorn does."""

    def __init__(self, app, options=ServerOptions(), on_ready=lambda: None):
        self.events = connections.ThrottledLog(interval_s=options.log_interval_s)
        super().__init__(uvicorn.Config(
            app, log_level="warning", access_log=False,
            http=connections.protocol_class(options, self.events),
            timeout_graceful_shutdown=options.shutdown_grace_period_s))
        self.on_ready = on_ready

    async def startup(self, sockets=None):
        connections.throttle_accept_errors(asyncio.get_running_loop(), self.events)
        await super().startup(sockets=sockets)
        if self.started:
            self.on_ready()

    def handle_exit(self, sig, frame):
        """SIGTERM is how a server is asked to stop: shut down and return, rather than have
        uvicorn raise the signal again once done (which kills the process)."""
        super().handle_exit(sig, frame)
        if sig == signal.SIGTERM:
            self._captured_signals.remove(sig)
