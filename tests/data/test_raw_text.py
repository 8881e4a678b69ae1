"""Raw corpus readers: plain, .gz, SGM and archived text come back exactly as sacreBLEU reads it."""

import collections
import gzip
import io
import tarfile

import pytest
from sacrebleu.dataset.fake_sgml import FakeSGMLDataset

from t2t_repro.data.raw_text import (
    ArchiveMember,
    ParallelReader,
    RawDataError,
    open_lines,
    read_member_lines,
    read_sgm_segments,
    read_text_lines,
    reservoir_sample,
)


def lines_by_hand(path):
    """A file's lines split on "\\n" only, the way the corpora are laid out (see data README)."""
    text = path.read_bytes().decode("utf-8")
    return text.removesuffix("\n").split("\n")


def write_lines(path, lines):
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def wmt_sgm(lines, setid="newstest2014", docs_of=50):
    """SGM text laid out like WMT's newstest2014-deen-src.en.sgm: docs of <p>-wrapped segments."""
    out = [f'<srcset setid="{setid}" srclang="any">']
    for start in range(0, len(lines), docs_of):
        out.append(f'<doc sysid="ref" docid="{start // docs_of}-bbc" genre="news" origlang="en">')
        out.append("<p>")
        for seg_id, line in enumerate(lines[start : start + docs_of], 1):
            out.append(f'<seg id="{seg_id}">{line}</seg>')
        out += ["</p>", "</doc>"]
    out.append("</srcset>")
    return out


@pytest.mark.parametrize(
    "folder, stem, expected_lines",
    [("multi30k_ende", "train", 29000), ("wmt14_ende", "newstest2014", 3003)],
)
def test_parallel_reader_matches_an_independent_count_on_real_corpora(
    shared_data_dir, folder, stem, expected_lines
):
    english = shared_data_dir / folder / f"{stem}.en"
    german = shared_data_dir / folder / f"{stem}.de"
    en_lines, de_lines = lines_by_hand(english), lines_by_hand(german)
    assert len(en_lines) == len(de_lines) == expected_lines
    expected_pairs = [(en, de) for en, de in zip(en_lines, de_lines) if en.strip() and de.strip()]
    empty_en = sum(not line.strip() for line in en_lines)
    empty_de = sum(not line.strip() for line in de_lines)

    reader = ParallelReader(english, german)
    assert list(reader) == expected_pairs
    assert (reader.stats.lines, reader.stats.kept) == (expected_lines, len(expected_pairs))
    assert (reader.stats.empty_input, reader.stats.empty_target) == (empty_en, empty_de)
    assert reader.describe() == (
        f"{english} / {german}: {expected_lines} lines, {len(expected_pairs)} kept, "
        f"{expected_lines - len(expected_pairs)} dropped as empty "
        f"(input {empty_en}, target {empty_de})"
    )


@pytest.mark.parametrize("input_count, target_count", [(5, 7), (7, 5)])
def test_misaligned_sources_raise_with_both_names_and_true_counts(
    tmp_path, input_count, target_count
):
    inputs = write_lines(tmp_path / "corpus.en", [f"in {i}" for i in range(input_count)])
    targets = write_lines(tmp_path / "corpus.de", [f"tg {i}" for i in range(target_count)])
    pairs = iter(ParallelReader(inputs, targets))
    assert next(pairs) == ("in 0", "tg 0")  # streamed: pairs come before the mismatch is seen
    with pytest.raises(RawDataError) as error:
        list(pairs)
    message = str(error.value)
    assert f"{inputs} has {input_count} lines" in message
    assert f"{targets} has {target_count} lines" in message


def test_empty_and_whitespace_only_pairs_are_dropped_and_counted(tmp_path):
    inputs = ["a", "", " \t ", "b", " c ", "", "d", "\u3000"]
    targets = ["x", "y", "z", "  ", "w", "", " v", "u"]
    reader = ParallelReader(
        write_lines(tmp_path / "in.txt", inputs), write_lines(tmp_path / "out.txt", targets)
    )
    assert list(reader) == [("a", "x"), (" c ", "w"), ("d", " v")]
    assert reader.stats.lines == 8
    assert reader.stats.empty_input == 4  # "", " \t ", "", ideographic space
    assert reader.stats.empty_target == 2  # "  ", ""
    assert reader.stats.kept == 3
    assert reader.describe().endswith(
        "in.txt / " + str(tmp_path / "out.txt") + ": 8 lines, 3 kept, 5 dropped as empty "
        "(input 4, target 2)"
    )


@pytest.mark.parametrize("suffix", [".sgm", ".sgm.gz"])
def test_sgm_round_trip_of_newstest2014(shared_data_dir, tmp_path, suffix):
    lines = lines_by_hand(shared_data_dir / "wmt14_ende" / "newstest2014.en")
    assert any("Standard & Poor's" in line for line in lines)  # WMT leaves "&" bare
    lines.append("1 < 2 & 3 > 0, and AT&amp;T stays as written")  # entities are not decoded
    sgm = write_lines(tmp_path / f"newstest2014-deen-src.en{suffix}", wmt_sgm(lines))
    assert list(read_sgm_segments(sgm)) == lines
    assert list(open_lines(str(sgm))) == lines


def test_sgm_edge_cases_read_exactly_as_sacrebleu_reads_them(tmp_path):
    sgm = tmp_path / "edge.sgm"
    sgm.write_bytes(
        "\n".join(
            [
                '<refset setid="edge" srclang="any" trglang="de">',
                '<doc sysid="ref" docid="d1" genre="news" origlang="en">',
                '<seg id="1">  leading and   inner \t spaces  </seg>',
                '<seg id="2">no\u00a0break space, AT&amp;T &lt;b&gt;</seg>',
                '<seg id="3">a < b & c > d</seg>',
                '<seg id="4">text</seg> tail after the tag',
                '<seg id="5">no closing tag',
                ' <seg id="6">indented, so markup</seg>',
                '<seg id="7"></seg>',
                '<seg id="8">inner</seg>twice</seg>',
                '<seg id="9">windows ending</seg>\r',
                "</doc>",
                "</refset>",
            ]
        ).encode("utf-8")
        + b"\n"
    )
    expected = [
        "leading and inner spaces",
        "no break space, AT&amp;T &lt;b&gt;",
        "a < b & c > d",
        "text tail after the tag",
        '<seg id="5">no closing tag',
        "",
        "inner</seg>twice",
        "windows ending",
    ]
    assert list(read_sgm_segments(sgm)) == expected
    # sacreBLEU's own conversion of the same file (what it scores against) agrees line for line.
    converted = tmp_path / "edge.txt"
    FakeSGMLDataset("t2t_repro_edge_check")._convert_format(str(sgm), str(converted))
    assert lines_by_hand(converted) == expected


def add_member(archive, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


@pytest.fixture(params=[("corpus.tgz", "w:gz"), ("corpus.tar.gz", "w:gz"), ("corpus.tar", "w")])
def archive(request, tmp_path):
    """An archive like WMT's, holding a folder, a plain, a .gz and an .sgm member."""
    filename, mode = request.param
    path = tmp_path / filename
    with tarfile.open(path, mode) as tar:
        folder = tarfile.TarInfo("dev")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        add_member(tar, "dev/news.en", "  Hello, world.\r\nSecond line \n".encode("utf-8"))
        add_member(tar, "dev/news.de.gz", gzip.compress("Hallo, Welt.\nZweite Zeile\n".encode()))
        sgm = "\n".join(wmt_sgm(["Grüße & mehr", "Zwei"])) + "\n"
        add_member(tar, "dev/news.sgm", sgm.encode("utf-8"))
    return path


def test_archive_members_are_read_in_place(archive):
    before = sorted(archive.parent.rglob("*"))
    english = ArchiveMember(archive, "dev/news.en")
    german = ArchiveMember(archive, "dev/news.de.gz")
    assert list(read_member_lines(english)) == ["  Hello, world.", "Second line "]
    assert list(read_member_lines(german)) == ["Hallo, Welt.", "Zweite Zeile"]
    sgm = ArchiveMember(str(archive), "dev/news.sgm")
    assert list(open_lines(sgm)) == ["Grüße & mehr", "Zwei"]
    assert list(ParallelReader(english, german)) == [
        ("  Hello, world.", "Hallo, Welt."),
        ("Second line ", "Zweite Zeile"),
    ]
    assert sorted(archive.parent.rglob("*")) == before  # nothing extracted to disk


def test_missing_archive_member_names_the_archive_and_what_it_holds(archive):
    with pytest.raises(RawDataError) as error:
        list(read_member_lines(ArchiveMember(archive, "dev/news.fr")))
    message = str(error.value)
    assert str(archive) in message and "'dev/news.fr'" in message
    assert "3 files" in message
    for present in ("dev/news.en", "dev/news.de.gz", "dev/news.sgm"):
        assert present in message


def test_missing_member_error_lists_only_a_few_of_a_large_archive(tmp_path):
    path = tmp_path / "big.tgz"
    with tarfile.open(path, "w:gz") as tar:
        for i in range(25):
            add_member(tar, f"train/part{i:02d}.txt", b"x\n")
    with pytest.raises(RawDataError) as error:
        list(read_member_lines(ArchiveMember(path, "train/part99.txt")))
    message = str(error.value)
    assert "train/part00.txt" in message and "train/part09.txt" in message
    assert "train/part10.txt" not in message
    assert "(25 in all)" in message


@pytest.mark.parametrize("filename", ["corpus.txt", "corpus.txt.gz"])
def test_text_lines_keep_whitespace_and_drop_only_line_endings(tmp_path, filename):
    data = (
        b"  leading\r\n"
        b"trailing  \n"
        b"\tboth \t\r\n"
        b"\n"
        b"lone\rreturn\n"
        b"two returns\r\r\n"
        b"caf\xc3\xa9 \xe2\x80\xa8 line separator\n"
        b"no final newline"
    )
    path = tmp_path / filename
    path.write_bytes(gzip.compress(data) if filename.endswith(".gz") else data)
    expected = [
        "  leading",
        "trailing  ",
        "\tboth \t",
        "",
        "lone\rreturn",
        "two returns\r",
        "café \u2028 line separator",
        "no final newline",
    ]
    assert list(read_text_lines(path)) == expected
    assert list(open_lines(str(path))) == expected


def test_text_that_is_not_utf8_is_reported_with_the_file_name(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("ok\nGrüße\n".encode("latin-1"))
    with pytest.raises(RawDataError, match="latin1.txt is not UTF-8"):
        list(read_text_lines(path))


def test_reservoir_sample_is_deterministic_per_seed_and_respects_size():
    stream = range(10_000)
    first = reservoir_sample(iter(stream), 100, seed=7)
    assert first == reservoir_sample(iter(stream), 100, seed=7)
    assert first != reservoir_sample(iter(stream), 100, seed=8)
    assert len(first) == len(set(first)) == 100
    assert set(first) <= set(stream)


def test_reservoir_sample_of_a_short_stream_returns_it_all():
    assert reservoir_sample(iter("abcde"), 10, seed=0) == list("abcde")
    assert reservoir_sample(iter("abcde"), 5, seed=0) == list("abcde")
    assert reservoir_sample(iter("abcde"), 0, seed=0) == []
    with pytest.raises(ValueError):
        reservoir_sample(iter("abcde"), -1, seed=0)


def test_reservoir_sample_covers_the_stream_evenly():
    # 1000 of 10000: each tenth of the stream expects 100 (sd about 9); the seed is fixed.
    sample = reservoir_sample(range(10_000), 1000, seed=2024)
    bins = collections.Counter(item // 1000 for item in sample)
    assert sorted(bins) == list(range(10))
    assert all(50 <= count <= 150 for count in bins.values())


def test_reservoir_sample_gives_every_item_the_same_chance():
    # One of three items over 3000 fixed seeds: each expects 1000 picks (sd about 26). An
    # off-by-one in the replacement draw would give the first item (almost) none.
    picks = collections.Counter(reservoir_sample("abc", 1, seed=seed)[0] for seed in range(3000))
    assert all(850 <= picks[item] <= 1150 for item in "abc")
