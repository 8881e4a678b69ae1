"""`client.answers_in_batches` with a stand-in for the server whose refusals are known: the
answers come in order a batch at a time, and a refused batch (or one out of memory) is sent
again line by line so that the error names the bad line after the answers of the lines before
it."""

import pytest

from t2t_repro.serving.client import (QueryError, ServerError, answers_in_batches,
                                      parse_predictions)


class Server:
    """Answers each text upper-cased; refuses a request holding "bad" with `status`, and
    `send` raises ValueError for a text holding "unsendable" (as --score does for a line
    without a tab). Records every request."""

    def __init__(self, status=400):
        self.status = status
        self.requests = []

    def send(self, texts):
        if any("unsendable" in text for text in texts):
            raise ValueError("not a pair")
        self.requests.append(list(texts))
        if any("bad" in text for text in texts):
            raise ServerError("refused", self.status)
        return [text.upper() for text in texts]


def numbered(texts):
    return list(enumerate(texts, 1))


def test_answers_come_a_batch_at_a_time_in_order():
    server = Server()
    texts = ["a", "b", "c", "d", "e"]
    assert list(answers_in_batches(server.send, numbered(texts), 2, "in.txt")) == [
        ["A", "B"], ["C", "D"], ["E"]]
    assert server.requests == [["a", "b"], ["c", "d"], ["e"]]


@pytest.mark.parametrize("bad_text, status, expected_error", [
    ("bad", 400, "in.txt line 4: refused (HTTP 400)"),
    ("bad", 429, "in.txt line 4: refused (HTTP 429)"),  # out of memory even alone
    ("unsendable", 400, "in.txt line 4: not a pair"),
])
def test_a_refused_batch_is_sent_line_by_line_and_the_error_names_the_line(bad_text, status,
                                                                            expected_error):
    server = Server(status)
    texts = ["a", "b", "c", bad_text, "e"]
    answers = answers_in_batches(server.send, numbered(texts), 3, "in.txt")
    assert next(answers) == ["A", "B", "C"]
    with pytest.raises(QueryError) as error:
        next(answers)  # line 4, before line 5's answer
    assert str(error.value) == expected_error
    sent_alone = [["a", "b", "c"]] + ([[bad_text, "e"], [bad_text]] if bad_text == "bad" else [])
    assert server.requests == sent_alone


def test_a_batch_out_of_memory_is_answered_line_by_line():
    server = Server()

    def send(texts):  # a server with memory for one text at a time
        if len(texts) > 1:
            server.requests.append(list(texts))
            raise ServerError("The model ran out of memory on 2 instances", 429)
        return server.send(texts)

    assert list(answers_in_batches(send, numbered(["a", "b", "c"]), 2, "in.txt")) == [
        ["A"], ["B"], ["C"]]
    assert server.requests == [["a", "b"], ["a"], ["b"], ["c"]]


def test_a_batch_refused_line_by_line_yields_the_lines_before_the_bad_one():
    server = Server()
    answers = answers_in_batches(server.send, numbered(["a", "b", "bad", "d"]), 4, "stdin")
    assert next(answers) == ["A"]
    assert next(answers) == ["B"]
    with pytest.raises(QueryError, match="^stdin line 3: refused"):
        next(answers)


def test_a_server_failure_other_than_a_bad_request_is_raised_as_it_is():
    server = Server(status=503)
    with pytest.raises(ServerError) as error:
        list(answers_in_batches(server.send, numbered(["a", "bad"]), 2, "in.txt"))
    assert error.value.status == 503 and server.requests == [["a", "bad"]]


@pytest.mark.parametrize("reply, error", [
    (b'{"predictions": [{"outputs": 5, "scores": 1}]}', "TypeError('an output is int, not text')"),
    (b'{"predictions": [{"outputs": ["a", null], "scores": [1, 2]}]}',
     "TypeError('an output is NoneType, not text')"),
    (b'{"predictions": [{"outputs": "a"}]}', "KeyError('scores')"),
    (b'{"predictions": [{"outputs": "a", "scores": "high"}]}',
     "ValueError(\"could not convert string to float: 'high'\")"),
])
def test_a_malformed_reply_is_an_unexpected_reply_error(reply, error):
    """Not a translation printed, nor a traceback where one is written out."""
    with pytest.raises(QueryError) as raised:
        parse_predictions(200, reply, 1)
    assert str(raised.value) == f"unexpected reply ({error}): {reply!r}"
