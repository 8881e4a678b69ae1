"""What uvicorn's HTTP/1.1 protocol (h11) lacks against slow, idle and too many clients:
deadlines for a request's headers and body, a cap on open connections, JSON for the server's
own 400, and warnings (uvicorn's own included) that a flood of clients cannot turn into a
flood of log lines.

Every connection waiting on its client has a deadline: a new connection must send a request's
complete headers within `request_header_timeout_s` of opening (a keep-alive connection, within
that time of the first byte of its next request; uvicorn's keep-alive timeout closes it while
it sends nothing), and then the whole body within `request_body_timeout_s`. A connection past
its deadline is closed. A connection beyond `max_connections` open ones is answered 503 with
a JSON error and closed. On shutdown, connections still sending a request are closed at once;
complete requests are answered.
"""

import asyncio
import collections
import functools
import json
import logging
import resource
import time

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

# uvicorn's own logger, so that these lines look like its other warnings.
LOG = logging.getLogger("uvicorn.error")
# File descriptors kept free for the server's own use (model files, logs, pipes) when the
# connection cap is derived from the open-file limit: this many, or half the limit if smaller.
RESERVED_DESCRIPTORS = 128
# How long a refused connection is given to read its 503 and close before it is closed: so
# that its request, unread, does not make the kernel reset the connection and lose the answer.
REFUSAL_LINGER_S = 1.0
# asyncio's message when accept() fails for want of file descriptors (or memory).
ACCEPT_ERROR = "socket.accept() out of system resource"
# Set in a request's ASGI scope when this module closed its connection (and logged why), so
# that the app does not log the same request again as one whose client left.
CLOSED_BY_SERVER = "t2t_repro.closed_by_server"


def open_file_limit():
    """The process's soft limit on open file descriptors (`ulimit -n`)."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def most_connections(limit=None):
    """The most connections that fit under the open-file limit `limit` (default: this
    process's) with RESERVED_DESCRIPTORS to spare."""
    limit = open_file_limit() if limit is None else limit
    if limit == resource.RLIM_INFINITY:
        limit = 1 << 20
    return max(1, limit - min(RESERVED_DESCRIPTORS, limit // 2))


class ThrottledLog:
    """Warnings of one kind logged at most once per `interval_s`: the first at once, the
    ones after it counted and summed up in one line when the interval ends. A client opening
    connections in a loop costs a line per interval, not one per connection."""

    def __init__(self, logger=LOG, interval_s=10.0):
        self.logger = logger
        self.interval_s = interval_s
        self._last_logged = {}
        self._suppressed = collections.Counter()
        self._latest = {}

    def report(self, kind, message):
        now = time.monotonic()
        last = self._last_logged.get(kind)
        if last is None or now - last >= self.interval_s:
            self._last_logged[kind] = now
            self.logger.warning(message)
            return
        self._latest[kind] = message
        self._suppressed[kind] += 1
        if self._suppressed[kind] == 1:
            asyncio.get_running_loop().call_later(last + self.interval_s - now, self._flush, kind)

    def _flush(self, kind):
        count = self._suppressed.pop(kind, 0)
        if count:
            self._last_logged[kind] = time.monotonic()
            self.logger.warning("%d more like this in the last %g s, the latest: %s", count,
                                self.interval_s, self._latest.pop(kind))


class ThrottledWarnings(logging.LoggerAdapter):
    """uvicorn's logger for one connection with its warnings, one per bad request (`Invalid
    HTTP request received.`, `Unsupported upgrade request.`), reported through the ThrottledLog
    `events`, each kind of text a kind; errors and other levels logged as they are."""

    def __init__(self, logger, events, peer):
        super().__init__(logger, {})
        self.events = events
        self.peer = peer  # the client's host:port, called when a warning is reported

    @property
    def level(self):
        return self.logger.level  # uvicorn reads it to skip its trace lines

    def warning(self, msg, *args, **kwargs):
        self.events.report(f"uvicorn: {msg}", f"{msg % args if args else msg} (client "
                           f"{self.peer()})")


def json_error_response(status, reason, message):
    """A complete HTTP/1.1 response closing the connection, body `{"error": message}`."""
    body = json.dumps({"error": message}).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body


class RefusedConnection(asyncio.Protocol):
    """A connection over the cap: answered 503 at once; what the client sends is read and
    dropped until it closes, or REFUSAL_LINGER_S has passed."""

    def __init__(self, answer):
        self.answer = answer
        self.timer = None

    def connection_made(self, transport):
        transport.write(self.answer)
        transport.write_eof()
        self.timer = asyncio.get_running_loop().call_later(REFUSAL_LINGER_S, transport.close)

    def data_received(self, data):
        pass

    def eof_received(self):
        return False  # the transport closes

    def connection_lost(self, exc):
        self.timer.cancel()


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the deadlines, cap and JSON 400 of this module's docstring;
    `options` are the rest API's ServerOptions, `events` a ThrottledLog."""

    def __init__(self, *args, options, events, **kwargs):
        super().__init__(*args, **kwargs)
        self.options = options
        self.events = events
        # A client sending what is not HTTP in a loop costs a line per interval, not per
        # connection.
        self.logger = ThrottledWarnings(self.logger, events, self._peer)
        self._phase = None  # (h11's state of the client, the request's cycle) timed
        self._deadline = None

    def _peer(self):
        return f"{self.client[0]}:{self.client[1]}" if self.client else "a client"

    def connection_made(self, transport):
        if len(self.server_state.connections) >= self.options.max_connections:
            self._refuse(transport)
            return
        super().connection_made(transport)
        self._update_deadline()
        self._arm(self.options.request_header_timeout_s, "request_header_timeout_s",
                  "the request's headers")

    def _refuse(self, transport):
        limit = self.options.max_connections
        client = transport.get_extra_info("peername")
        peer = f"{client[0]}:{client[1]}" if client else "a client"
        self.events.report("refused", f"refused a connection from {peer}: {limit} "
                           f"connections are open, the most --max_connections allows")
        refusal = RefusedConnection(json_error_response(
            503, "Service Unavailable", f"This server has the most connections it takes open "
            f"(--max_connections={limit}); retry later."))
        transport.set_protocol(refusal)
        refusal.connection_made(transport)

    def data_received(self, data):
        if self._deadline is None and self.conn.their_state is h11.IDLE:
            # The first bytes of a keep-alive connection's next request.
            self._arm(self.options.request_header_timeout_s, "request_header_timeout_s",
                      "the request's headers")
        super().data_received(data)
        self._update_deadline()

    def on_response_complete(self):
        super().on_response_complete()
        self._update_deadline()

    def connection_lost(self, exc):
        super().connection_lost(exc)
        self._cancel_deadline()

    def shutdown(self):
        """Closes a connection still sending its request's body; uvicorn closes idle ones and
        lets complete requests finish."""
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            self._close("shutdown", f"closed the connection from {self._peer()} on shutdown: "
                        f"its request's body was not complete")
            return
        super().shutdown()

    def send_400_response(self, msg):
        """uvicorn's answer to what is not HTTP, as a JSON error."""
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            self.transport.write(json_error_response(400, "Bad Request", msg))
        self.transport.close()

    def _update_deadline(self):
        """Starts the body deadline when a request's headers are in, and stops the deadline
        once its body is (or a response ended the request)."""
        phase = (self.conn.their_state, self.cycle)
        if phase == self._phase:
            return
        self._phase = phase
        self._cancel_deadline()
        if self.conn.their_state is h11.SEND_BODY:
            self._arm(self.options.request_body_timeout_s, "request_body_timeout_s",
                      "the request's body")

    def _arm(self, seconds, flag, what):
        self._cancel_deadline()
        self._deadline = self.loop.call_later(seconds, self._time_out, flag, seconds, what)

    def _cancel_deadline(self):
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _time_out(self, flag, seconds, what):
        self._deadline = None
        if self.transport.is_closing():
            return
        self._close(flag, f"closed the connection from {self._peer()}: {what} did not arrive "
                    f"within --{flag}={seconds:g} s")

    def _close(self, kind, message):
        """Closes the connection with one warning, the only one for its request."""
        if self.cycle is not None:
            self.cycle.scope[CLOSED_BY_SERVER] = True
        self.events.report(kind, message)
        self.transport.close()


def protocol_class(options, events):
    """The protocol for uvicorn's Config(http=...): GuardedH11Protocol with these options."""
    return functools.partial(GuardedH11Protocol, options=options, events=events)


def throttle_accept_errors(loop, events):
    """Logs asyncio's accept() failures for want of descriptors through `events` (asyncio
    logs one traceback per attempt, thousands a second); other errors as before."""

    def handle(loop, context):
        if context.get("message") == ACCEPT_ERROR:
            events.report("accept", f"cannot accept connections: {context.get('exception')}; "
                          f"raise the open-file limit (ulimit -n) or lower --max_connections")
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handle)
