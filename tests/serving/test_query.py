"""`python -m t2t_repro.query` and the client's `predict` against a real `python -m
t2t_repro.serve` serving the toy export (it upper-cases ASCII; inputs over 40 bytes fail)."""

import re
import socket

import pytest

from conftest import output_lines, run_module, run_module_in_subprocess
from t2t_repro.serving.client import ServerError, predict
from t2t_repro.serving.local_server import LocalServer
from toy_export import MAX_INPUT_BYTES, expected_translation, write_toy_export

SENTENCES = ["A man rides a bike.", "Zwei Hunde spielen im Schnee.", "", "café, crème brûlée",
             "the end"]
TOO_LONG = "x" * (MAX_INPUT_BYTES + 1)
HTTP_4XX = re.compile(r"\(HTTP 4\d\d\)")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    export_dir = tmp_path_factory.mktemp("toy_export")
    write_toy_export(export_dir, 3)
    with LocalServer([f"--export_dir={export_dir}"]) as running:
        yield running


def query(server, *args, input=None):
    return run_module("t2t_repro.query", f"--server={server.url}", *args, input=input)


def translations(texts):
    return "".join(expected_translation(text)[0] + "\n" for text in texts)


def test_stdin_lines_are_translated_in_order(server):
    result = query(server, input="".join(line + "\n" for line in SENTENCES))
    assert result.returncode == 0, result.stderr
    assert result.stdout == translations(SENTENCES)


@pytest.mark.parametrize("batch_size", [1, 2, 16])
def test_inputs_file_is_translated_in_order_whatever_the_batch_size(server, tmp_path,
                                                                     batch_size):
    inputs = tmp_path / "inputs.en"
    inputs.write_bytes("\r\n".join(SENTENCES).encode())  # CRLF endings, no final newline
    result = query(server, f"--inputs_file={inputs}", f"--batch_size={batch_size}")
    assert result.returncode == 0, result.stderr
    assert result.stdout == translations(SENTENCES)


@pytest.mark.parametrize("batch_size", [1, 2, 3, 5])
def test_the_lines_before_a_rejected_one_are_printed_and_the_error_names_its_line(
        server, batch_size):
    """Whichever batch holds the rejected line, and wherever in it."""
    lines = SENTENCES[:4] + [TOO_LONG]
    result = query(server, f"--batch_size={batch_size}", input="\n".join(lines))
    assert result.returncode != 0
    assert result.stdout == translations(lines[:4])
    assert f"max_input_tokens={MAX_INPUT_BYTES}" in result.stderr
    assert result.stderr.startswith("error: stdin line 5: ") and HTTP_4XX.search(result.stderr), \
        result.stderr


def test_a_rejected_inputs_file_line_is_named_after_the_translations_before_it(server,
                                                                             tmp_path):
    """Line 21 rejected in the second batch of 16: lines 1 to 20 are printed, not 16."""
    lines = [f"sentence {number}" for number in range(1, 21)] + [TOO_LONG, "after"]
    inputs = tmp_path / "inputs.en"
    inputs.write_text("".join(line + "\n" for line in lines))
    result = query(server, f"--inputs_file={inputs}")
    assert result.returncode == 1
    assert result.stdout == translations(lines[:20])
    assert result.stderr.startswith(f"error: {inputs} line 21: "), result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_beams_are_printed_with_their_scores_tab_separated(server):
    lines = ["Two dogs.", "a Cat"]
    result = query(server, "--signature_name=beams", "--batch_size=1", input="\n".join(lines))
    assert result.returncode == 0, result.stderr
    assert output_lines(result.stdout) == [
        f"{line.upper()}\t{-len(line):.4f}\t{line.lower()}\t{-len(line) - 1:.4f}"
        for line in lines]


def test_translations_are_written_in_utf8_whatever_the_locales_encoding(server):
    """As the command reads its lines: an ASCII locale does not stop it at the first ä."""
    lines = ["Grüße aus Köln", "plain ascii"]
    result = run_module_in_subprocess("t2t_repro.query", f"--server={server.url}",
                                      input="".join(line + "\n" for line in lines),
                                      PYTHONIOENCODING="ascii")
    assert result.returncode == 0, result.stderr
    assert result.stdout == translations(lines)


def test_an_unknown_model_is_the_servers_error(server):
    result = query(server, "--servable_name=no_such_model", input="hello\n")  # t2t's flag name
    assert result.returncode != 0
    assert HTTP_4XX.search(result.stderr), result.stderr


def test_no_server_is_a_clear_error():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = run_module("t2t_repro.query", f"--server=http://127.0.0.1:{port}",
                        input="hello\n")
    assert result.returncode != 0
    assert f"http://127.0.0.1:{port}/v1/models/default:predict" in result.stderr
    assert "python -m t2t_repro.serve" in result.stderr


@pytest.mark.parametrize("server", ["127.0.0.1:8501", "ftp://127.0.0.1:8501", "http://"])
def test_a_server_that_is_no_http_address_is_a_one_line_error(server):
    result = run_module("t2t_repro.query", f"--server={server}", input="hello\n")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip() == (
        f"error: --server={server} is not an http:// or https:// address; give one such as "
        f"--server=http://127.0.0.1:8501.")


@pytest.mark.parametrize("flags, message", [
    (["--score", "--signature_name=beams"],
     "--score sends every line to the score signature; give no --signature_name with it."),
    (["--signature_name=score"],
     "--signature_name=score takes lines source<TAB>target; give --score instead, which sends "
     "them."),
])
def test_a_signature_given_other_than_through_score_is_a_one_line_error(flags, message):
    """Before any server is asked (there is none at this address)."""
    result = run_module("t2t_repro.query", "--server=http://127.0.0.1:9", *flags,
                        input="hello\tHallo\n")
    assert result.returncode == 1 and result.stderr.strip() == f"error: {message}", result.stderr


def test_an_inputs_file_that_cannot_be_read_is_a_one_line_error_naming_it(tmp_path):
    missing = tmp_path / "absent.txt"
    result = run_module("t2t_repro.query", f"--inputs_file={missing}")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip() == (
        f"error: cannot read --inputs_file={missing}: No such file or directory.")


def test_predict_gives_each_answer_and_every_beam(server):
    texts = ["a man", "café"]
    assert predict(server.url, "default", texts) == [expected_translation(t) for t in texts]
    assert predict(server.url, "default", ["Dog"], "beams") == [[("DOG", -3.0), ("dog", -4.0)]]
    assert predict(server.url, "default", []) == []
    with pytest.raises(ServerError, match=f"max_input_tokens={MAX_INPUT_BYTES}") as raised:
        predict(server.url, "default", ["ok", TOO_LONG])
    assert 400 <= raised.value.status < 500
