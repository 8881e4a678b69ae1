"""Serves an exported model over TF Serving's REST API, as `tensorflow_model_server` would.

    python -m t2t_repro.serve --export_dir=RUN/export [--model_name=default] \\
        [--host=127.0.0.1] [--port=8501] [--enable_batching=true] [--max_batch_size=32] \\
        [--batch_timeout_micros=5000] [--max_enqueued_instances=1024] \\
        [--max_instances_per_request=256] [--max_body_bytes=1048576] \\
        [--request_header_timeout_s=10] [--request_body_timeout_s=60] \\
        [--max_connections=<open-file limit less 128>] [--shutdown_grace_period_s=10]

Loads the newest version under --export_dir (TF Serving's layout, `python -m t2t_repro.exporter`
writes it) and prints `Serving model NAME version V at http://HOST:PORT/v1/models/NAME` on
stderr once it takes requests (--port=0: a free port, the one chosen printed). Then, e.g.:

    curl -d '{"instances": ["A man rides a horse."]}' \\
        http://127.0.0.1:8501/v1/models/default:predict

Concurrent requests are merged into model calls of up to --max_batch_size sentences (see
serving/request_batching.py). A connection must send its request's headers and body within
--request_header_timeout_s and --request_body_timeout_s, else it is closed; one beyond
--max_connections open ones is answered 503 (serving/connections.py). Ctrl-C or SIGTERM stops
it: connections still sending a request are closed, complete requests answered for at most
--shutdown_grace_period_s, and it exits with status 0.
"""

import re
import sys

from t2t_repro.cli import quiet_tensorflow

quiet_tensorflow.import_tensorflow()  # before anything imports it: see the module

import tensorflow as tf  # noqa: E402
from absl import flags  # noqa: E402

from t2t_repro.cli import entry_point, run_flags  # noqa: E402,F401 (--export_dir, --model_name)
from t2t_repro.cli.entry_point import check_usage  # noqa: E402
from t2t_repro.errors import ConfigurationError  # noqa: E402
from t2t_repro.serving import connections, model_store, rest_api  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_string("host", "127.0.0.1", "The address to listen on (0.0.0.0: every interface).")
flags.DEFINE_integer("port", 8501, "The port to listen on (0: a free one).", lower_bound=0,
                     upper_bound=65535)
flags.DEFINE_boolean("enable_batching", True,
                     "Merge concurrent requests into shared model calls.")
flags.DEFINE_integer("max_batch_size", 32, "The most instances in one model call.",
                     lower_bound=1)
flags.DEFINE_integer("batch_timeout_micros", 5000, "How long a batch waits for more instances "
                     "once its first has arrived.", lower_bound=0)
flags.DEFINE_integer("max_enqueued_instances", 1024, "The most instances waiting for a model "
                     "call; a request beyond that is refused with HTTP 503.", lower_bound=1)
flags.DEFINE_integer("max_instances_per_request", 256, "The most instances in one request "
                     "(more: HTTP 400).", lower_bound=1)
flags.DEFINE_integer("max_body_bytes", 1 << 20, "The largest request body (larger: HTTP 400).",
                     lower_bound=1)
flags.DEFINE_float("request_header_timeout_s", 10, "Seconds a connection has to send a request's "
                   "complete headers, from when it opens (keep-alive: from the request's first "
                   "byte); then it is closed.")
flags.DEFINE_float("request_body_timeout_s", 60, "Seconds a request has to send its complete "
                   "body once its headers are in; then its connection is closed.")
flags.DEFINE_integer("max_connections", connections.most_connections(), "The most connections "
                     "open at once; one more is answered HTTP 503 and closed. The default is "
                     f"the open-file limit (ulimit -n) less {connections.RESERVED_DESCRIPTORS} "
                     "(or less half of it, if smaller), and so is the most allowed.",
                     lower_bound=1)
flags.DEFINE_float("shutdown_grace_period_s", 10, "Seconds given to complete requests still "
                   "being answered when the server is stopped (SIGTERM, Ctrl-C); connections "
                   "still sending a request are closed at once.")


def server_options():
    """The flags as ServerOptions; a ConfigurationError when a request of the largest size
    allowed could never enter the queue."""
    if FLAGS.enable_batching and FLAGS.max_instances_per_request > FLAGS.max_enqueued_instances:
        raise ConfigurationError(
            f"--max_instances_per_request={FLAGS.max_instances_per_request} is more "
            f"than --max_enqueued_instances={FLAGS.max_enqueued_instances}, so such a "
            f"request could never be queued; lower the one or raise the other.")
    for name in ("request_header_timeout_s", "request_body_timeout_s"):
        if not FLAGS[name].value > 0:
            raise ConfigurationError(f"--{name}={FLAGS[name].value}: give a number of seconds "
                                     f"more than 0.")
    if not FLAGS.shutdown_grace_period_s >= 0:
        raise ConfigurationError(f"--shutdown_grace_period_s={FLAGS.shutdown_grace_period_s}: "
                                 f"give a number of seconds, 0 or more.")
    most = connections.most_connections()
    if FLAGS.max_connections > most:
        raise ConfigurationError(f"--max_connections={FLAGS.max_connections} is more than the "
                 f"open-file limit allows (ulimit -n: {connections.open_file_limit()}, at most "
                 f"{most} connections); raise the limit or lower the flag.")
    return rest_api.ServerOptions(
        enable_batching=FLAGS.enable_batching, max_batch_size=FLAGS.max_batch_size,
        batch_timeout_micros=FLAGS.batch_timeout_micros,
        max_enqueued_instances=FLAGS.max_enqueued_instances,
        max_instances_per_request=FLAGS.max_instances_per_request,
        max_body_bytes=FLAGS.max_body_bytes,
        request_header_timeout_s=FLAGS.request_header_timeout_s,
        request_body_timeout_s=FLAGS.request_body_timeout_s,
        max_connections=FLAGS.max_connections,
        shutdown_grace_period_s=FLAGS.shutdown_grace_period_s)


def main(argv):
    check_usage(argv, ("export_dir",))
    if not re.fullmatch(r"[A-Za-z0-9._-]+", FLAGS.model_name):
        raise ConfigurationError(f"--model_name={FLAGS.model_name!r}: a name in URL paths takes "
                 f"letters, digits, '-', '_' and '.' only.")
    options = server_options()
    try:
        store = model_store.ModelStore(model_store.load_latest(FLAGS.export_dir, FLAGS.model_name))
    except tf.errors.OpError as error:
        raise ConfigurationError(f"cannot load the newest export in {FLAGS.export_dir}: "
                                 f"{error.message}") from error
    try:
        sock = rest_api.listening_socket(FLAGS.host, FLAGS.port)
    except OSError as error:
        address = rest_api.host_port(FLAGS.host, FLAGS.port)  # [::]:8501, not :::8501
        raise ConfigurationError(f"cannot listen on {address}: {error}") from error
    url = (f"{rest_api.base_url(FLAGS.host, sock.getsockname()[1])}/v1/models/"
           f"{FLAGS.model_name}")

    def announce():
        print(f"Serving model {FLAGS.model_name} version {store.model.version} at {url}",
              file=sys.stderr, flush=True)

    server = rest_api.Server(rest_api.create_app(store, options), options, on_ready=announce)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn re-raises Ctrl-C once it has shut down gracefully
        pass


if __name__ == "__main__":
    entry_point.run(main, ("export_dir", "model_name"))
