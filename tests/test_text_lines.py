"""One rule for reading a text file as lines, shared by the decoder, the BLEU command and the
raw-corpus readers: lines end at "\\n" only (as sacreBLEU and `wc -l` count them). That the
three commands agree is tested in test_decoder_input.py, which has a model to decode with."""

import pytest

from t2t_repro.utils.text_lines import TextLinesError, read_lines

# "\r\n" ends a line; a lone "\r" and U+2028 stay inside theirs; the last line has no "\n".
AWKWARD = b"1 2\r3\n4\r\n5\xe2\x80\xa86\n7"
AWKWARD_LINES = ["1 2\r3", "4", "5\u20286", "7"]


def test_lines_end_at_newline_only(tmp_path):
    path = tmp_path / "awkward.txt"
    path.write_bytes(AWKWARD)
    assert read_lines(path) == AWKWARD_LINES
    assert len(read_lines(path)) == AWKWARD.count(b"\n") + 1  # wc -l, plus the unended line


@pytest.mark.parametrize("data, lines", [
    (b"", []),
    (b"\n", [""]),
    (b"a\r", ["a\r"]),
    (b"a\r\r\n", ["a\r"]),
    (b"a\n\n", ["a", ""]),
])
def test_edge_cases(tmp_path, data, lines):
    path = tmp_path / "edge.txt"
    path.write_bytes(data)
    assert read_lines(path) == lines


def test_utf8_errors_name_the_file_and_line(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("ok\nGrüße\n".encode("latin-1"))
    with pytest.raises(TextLinesError, match=r"latin1\.txt is not UTF-8 text: line 2 "):
        read_lines(path)
