"""A client of the REST API that `python -m t2t_repro.serve` and TF Serving speak.

`predict` sends texts in one `POST /v1/models/NAME:predict` (`{"instances": [...]}`) and gives
back each input's translation; `score` sends (source, target) pairs to the `score` signature
and gives back each target's log-probability and pieces; `answers_in_batches` sends a stream of
lines a batch at a time and names the line a server refuses. The request and reply helpers are
shared with the serving benchmark, which keeps its own connections open. Standard library only:
a client machine needs nothing of this project's dependencies.
"""

import http.client
import itertools
import json
import urllib.error
import urllib.parse
import urllib.request
from http import HTTPStatus

from t2t_repro.errors import UserError
from t2t_repro.names import BEST_SIGNATURE, SCORE_SIGNATURE

START_HINT = "start one with `python -m t2t_repro.serve --export_dir=RUN/export`"

# Direct connections only: an http_proxy set for the internet must not carry requests meant for
# a server on this machine or network.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class QueryError(UserError):
    """A request that got no translation; the message says why."""


class ServerError(QueryError):
    """The server answered with an error: its own text and the HTTP status."""

    def __init__(self, message, status):
        super().__init__(f"{message} (HTTP {status})")
        self.status = status


def check_server(server):
    """QueryError unless `server` is an http:// or https:// address with a host."""
    address = urllib.parse.urlsplit(server)
    if address.scheme not in ("http", "https") or not address.netloc:
        raise QueryError(f"--server={server} is not an http:// or https:// address; give one "
                         f"such as --server=http://127.0.0.1:8501.")


def predict_path(model_name):
    return f"/v1/models/{urllib.parse.quote(model_name, safe='')}:predict"


def request_body(instances, signature_name=BEST_SIGNATURE):
    """The JSON of a row-format predict request for `instances` (texts, or {input name: text}
    each), as bytes."""
    return json.dumps({"signature_name": signature_name, "instances": list(instances)}).encode()


def error_text(body):
    """The server's `{"error": ...}` text, or the body itself when it is not that JSON."""
    text = body.decode("utf-8", "replace")
    try:
        return json.loads(text)["error"]
    except (ValueError, KeyError, TypeError):
        return text.strip() or "(empty reply)"


def parse_predictions(status, body, count, answer=None):
    """Each input's answer from a reply: `(text, score)`, or for a signature giving every
    beam, a list of them, best first; `answer(prediction)` makes another signature's answer
    from its {output name: value}. Raises ServerError for an error reply and QueryError for one
    that is not `count` predictions."""
    if status != 200:
        raise ServerError(error_text(body), status)
    answer = answer or (lambda prediction: _answer(prediction["outputs"], prediction["scores"]))
    try:
        answers = [answer(prediction) for prediction in json.loads(body)["predictions"]]
    except (ValueError, KeyError, TypeError) as error:
        raise QueryError(f"unexpected reply ({error!r}): {body[:200]!r}") from None
    if len(answers) != count:
        raise QueryError(f"the server answered {len(answers)} predictions for {count} inputs")
    return answers


def _answer(outputs, scores):
    if isinstance(outputs, list):
        return [(_text(text), float(score)) for text, score in zip(outputs, scores, strict=True)]
    return _text(outputs), float(scores)


def _text(output):
    """A translation from a reply; TypeError (an unexpected reply) for an output not text."""
    if not isinstance(output, str):
        raise TypeError(f"an output is {type(output).__name__}, not text")
    return output


def predict(server, model_name, texts, signature_name=BEST_SIGNATURE, timeout=None):
    """Translates `texts` with one request to `server` (e.g. `http://127.0.0.1:8501`); returns
    `parse_predictions`' answers in order. Raises ServerError when the server rejects the
    request, QueryError when it cannot be reached or does not answer within `timeout` s."""
    return _predict(server, model_name, texts, signature_name, timeout)


def _score_answer(prediction):
    return float(prediction["scores"]), int(prediction["lengths"])


def score(server, model_name, pairs, timeout=None):
    """Scores `(source, target)` pairs with one request to the `score` signature; returns each
    target's `(log-probability, pieces)` in order. Errors as `predict`'s."""
    return _predict(server, model_name,
                    [{"inputs": source, "targets": target} for source, target in pairs],
                    SCORE_SIGNATURE, timeout, _score_answer)


def _predict(server, model_name, instances, signature_name, timeout, answer=None):
    if not instances:
        return []
    url = server.rstrip("/") + predict_path(model_name)
    request = urllib.request.Request(url, data=request_body(instances, signature_name),
                                     headers={"Content-Type": "application/json"})
    try:
        with _OPENER.open(request, timeout=timeout) as reply:
            return parse_predictions(reply.status, reply.read(), len(instances), answer)
    except urllib.error.HTTPError as error:
        raise ServerError(error_text(error.read()), error.code) from None
    except urllib.error.URLError as error:
        if isinstance(error.reason, TimeoutError):
            raise QueryError(f"{url} did not answer within {timeout} s.") from None
        raise QueryError(f"no server at {url} ({error.reason}); {START_HINT}.") from None
    except TimeoutError:
        raise QueryError(f"{url} did not answer within {timeout} s.") from None
    except (OSError, http.client.HTTPException) as error:
        raise QueryError(f"the request to {url} failed: {error!r}") from None


# A bad line, or a call out of memory (the server's answer when fewer instances may fit).
_SENT_AGAIN_LINE_BY_LINE = (HTTPStatus.BAD_REQUEST, HTTPStatus.TOO_MANY_REQUESTS)


def answers_in_batches(send, numbered_lines, batch_size, label):
    """Yields the answers of `numbered_lines` ((line number, text) pairs of the stream `label`),
    a batch's list at a time, in order; `send(texts)` makes one request of them and returns
    their answers, or raises ValueError for a text it cannot send.

    A batch the server rejects as bad (HTTP 400) or runs out of memory on (429), or that holds
    a text `send` refuses, is sent again line by line, so that the answers of the lines before
    the bad one are yielded and the QueryError raised names its line rather than its place in
    the batch. Any other server error is raised as it is.
    """
    lines = iter(numbered_lines)
    while batch := list(itertools.islice(lines, batch_size)):
        if len(batch) > 1:
            try:
                yield send([text for _, text in batch])
                continue
            except ServerError as error:
                if error.status not in _SENT_AGAIN_LINE_BY_LINE:
                    raise
            except ValueError:
                pass
        for number, text in batch:
            yield _answer_of_line(send, number, text, label)


def _answer_of_line(send, number, text, label):
    """`send([text])`; the server's refusal of it (400, 429) or `send`'s ValueError is a
    QueryError naming line `number` of `label`."""
    try:
        return send([text])
    except ServerError as error:
        if error.status not in _SENT_AGAIN_LINE_BY_LINE:
            raise
        raise QueryError(f"{label} line {number}: {error}") from None
    except ValueError as error:
        raise QueryError(f"{label} line {number}: {error}") from None
