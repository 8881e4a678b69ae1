"""One rule for reading a text file as lines, shared by the decoder, the BLEU command and the
raw-corpus readers: lines end at "\\n" only (as sacreBLEU and `wc -l` count them). That the
three commands agree is tested in test_decoder_input.py, which has a model to decode with.
Output lines keep to it: one per input, whatever a translation holds."""

import pytest

from t2t_repro.decoding.file_decoding import decode_output_line
from t2t_repro.query import answer_line
from t2t_repro.serving.export import output_fields
from t2t_repro.utils.text_lines import (TextLinesError, output_field, read_aligned_lines,
                                        read_lines)

# "\r\n" ends a line; a lone "\r" and U+2028 stay inside theirs; the last line has no "\n".
AWKWARD = b"1 2\r3\n4\r\n5\xe2\x80\xa86\n7"
AWKWARD_LINES = ["1 2\r3", "4", "5\u20286", "7"]
BOM = b"\xef\xbb\xbf"  # UTF-8's byte order mark, as Windows editors open a file with it


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


@pytest.mark.parametrize("data, lines", [
    (BOM + AWKWARD, AWKWARD_LINES),
    (BOM, []),
    (BOM + b"\n", [""]),
    (b"a\n" + BOM + b"b", ["a", "\ufeffb"]),  # only the stream's first bytes mark it
])
def test_a_byte_order_mark_opening_the_file_is_no_part_of_its_first_line(tmp_path, data, lines):
    path = tmp_path / "marked.txt"
    path.write_bytes(data)
    assert read_lines(path) == lines


def test_utf8_errors_name_the_file_and_line(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("ok\nGrüße\n".encode("latin-1"))
    with pytest.raises(TextLinesError, match=r"latin1\.txt is not UTF-8 text: line 2 "):
        read_lines(path)


@pytest.mark.parametrize("text", ["ein\nMann", "ein\r\nMann", "ein\tMann", "ein\rMann\r"])
def test_an_output_with_a_line_break_or_tab_stays_one_line_with_its_fields(tmp_path, text):
    """A model can emit a line break or a tab (a byte-fallback piece); the decoder's and the
    query command's output lines keep one line per input and their tab-separated fields."""
    beams = [(text, -1.5), ("zwei", -2.25)]
    lines = [decode_output_line(beams, return_beams=False), answer_line(beams[0]),
             decode_output_line(beams, return_beams=True), answer_line(beams)]
    path = tmp_path / "decoded.txt"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    best, queried_best, every, queried_every = read_lines(path)
    assert best.split() == ["ein", "Mann"] and queried_best == best
    assert every.split("\t") == [best, "-1.5000", "zwei", "-2.2500"]
    assert queried_every == every


def test_an_exported_model_writes_its_outputs_as_the_decoder_does():
    """The export's in-graph replacement against `output_field` on the same texts: line breaks
    and tabs become spaces; other separators, non-ASCII text and bytes that are not UTF-8
    stay as they are."""
    texts = ["ein\nMann", "a\r\nb\tc\r", "\x1d \u2028 Grüße", "", "\t"]
    graph = [text.decode("utf-8") for text in output_fields(texts).numpy().tolist()]
    assert graph == [output_field(text) for text in texts]
    assert output_fields(["\xff\n".encode("latin-1")]).numpy().tolist() == [b"\xff "]


def test_aligned_files_come_back_together_and_unequal_counts_name_both(tmp_path):
    two, three = tmp_path / "two.de", tmp_path / "three.en"
    two.write_text("a\nb\n")
    three.write_text("x\ny\nz\n")
    assert read_aligned_lines(two, "--a", two, "--b") == (["a", "b"], ["a", "b"])
    with pytest.raises(TextLinesError) as error:
        read_aligned_lines(two, "--translation", three, "--reference")
    assert str(error.value) == (f"--translation={two} has 2 lines but --reference={three} has "
                                f"3; they must be aligned line by line.")
