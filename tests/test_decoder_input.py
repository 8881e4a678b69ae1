"""What the decoder does with awkward input: lines split as the BLEU command and the raw-text
readers split them, and lines the problem cannot encode reported by file and line."""

import pytest

from conftest import run_module
from t2t_repro.data.raw_text import read_text_lines

# "\r\n" ends a line; a lone "\r" and U+2028 stay inside theirs (str.split() treats both as
# spaces, so every line encodes); the last line has no "\n".
AWKWARD = b"1 2\r3\n4\r\n5\xe2\x80\xa86\n7"
AWKWARD_LINE_COUNT = 4


@pytest.fixture(scope="module")
def reverse_run(tmp_path_factory):
    """transformer_tiny trained 2 steps on algorithmic_reverse: enough to decode with."""
    output_dir = tmp_path_factory.mktemp("decoder_input") / "run"
    result = run_module(
        "t2t_repro.trainer", "--problem=algorithmic_reverse", "--hparams_set=transformer_tiny",
        "--hparams=batch_size=256,max_length=24", f"--output_dir={output_dir}",
        "--train_steps=2", "--save_checkpoints_steps=2", "--schedule=train",
    )
    assert result.returncode == 0, result.stderr
    return output_dir


def run_decoder(output_dir, *args, **kwargs):
    return run_module("t2t_repro.decoder", "--problem=algorithmic_reverse",
                      f"--output_dir={output_dir}", "--decode_hparams=beam_size=1", *args,
                      **kwargs)


def test_decoder_bleu_and_raw_text_count_the_same_lines(reverse_run, tmp_path):
    """A stray "\\r" or U+2028 must not shift one file's lines against another's."""
    awkward = tmp_path / "awkward.txt"
    awkward.write_bytes(AWKWARD)
    plain = tmp_path / "plain.txt"
    plain.write_text("".join(f"{number}\n" for number in range(AWKWARD_LINE_COUNT)))
    decodes = tmp_path / "decodes.txt"

    decoder = run_decoder(reverse_run, f"--decode_from_file={awkward}",
                          f"--decode_reference={plain}", f"--decode_to_file={decodes}")
    assert decoder.returncode == 0, decoder.stderr
    assert len(decodes.read_text().split("\n")) - 1 == AWKWARD_LINE_COUNT

    bleu = run_module("t2t_repro.bleu", f"--translation={awkward}", f"--reference={plain}")
    assert bleu.returncode == 0, bleu.stderr

    assert len(list(read_text_lines(awkward))) == AWKWARD_LINE_COUNT


def test_a_file_line_the_problem_cannot_encode_stops_before_decoding(reverse_run, tmp_path):
    sources = tmp_path / "sources.txt"
    sources.write_text("1 2 3\n4 x 5\n6 7\n")
    decodes = tmp_path / "decodes.txt"
    result = run_decoder(reverse_run, f"--decode_from_file={sources}",
                         f"--decode_to_file={decodes}")
    assert result.returncode != 0
    assert f"{sources} line 2: algorithmic_reverse accepts only the symbols 0..9" in result.stderr
    assert "'x'" in result.stderr and "Traceback" not in result.stderr
    assert "Decoding with" not in result.stderr and not decodes.exists()


def test_a_stdin_line_the_problem_cannot_encode_is_reported_and_skipped(reverse_run):
    result = run_decoder(reverse_run, input="1 2 3\n4 x 5\n6 7\n")
    assert result.returncode == 0, result.stderr
    assert "stdin line 2 skipped: algorithmic_reverse accepts only the symbols" in result.stderr
    assert len(result.stdout.splitlines()) == 2


@pytest.fixture(scope="module")
def learned_positions_run(tmp_path_factory):
    """A learned-position model whose table holds 8 positions, trained 2 steps."""
    output_dir = tmp_path_factory.mktemp("decoder_input_learned") / "run"
    result = run_module(
        "t2t_repro.trainer", "--problem=algorithmic_reverse", "--hparams_set=transformer_tiny",
        "--hparams=batch_size=256,max_length=8,position_encoding=learned",
        f"--output_dir={output_dir}", "--train_steps=2", "--save_checkpoints_steps=2",
        "--schedule=train",
    )
    assert result.returncode == 0, result.stderr
    return output_dir


def test_a_file_line_longer_than_the_position_table_stops_before_decoding(
        learned_positions_run, tmp_path):
    sources = tmp_path / "sources.txt"
    sources.write_text("1 2 3\n" + " ".join("1" * 9) + "\n")  # 9 symbols + EOS: 10 positions
    decodes = tmp_path / "decodes.txt"
    result = run_decoder(learned_positions_run, f"--decode_from_file={sources}",
                         f"--decode_to_file={decodes}")
    assert result.returncode != 0
    assert f"{sources} line 2: The source has 10 positions" in result.stderr
    assert "max_length=8" in result.stderr and "Traceback" not in result.stderr
    assert not decodes.exists()


def test_a_stdin_line_longer_than_the_position_table_is_reported_and_skipped(
        learned_positions_run):
    result = run_decoder(learned_positions_run, input="1 2\n" + " ".join("1" * 9) + "\n3\n")
    assert result.returncode == 0, result.stderr
    assert "stdin line 2 skipped: The source has 10 positions" in result.stderr
    assert len(result.stdout.splitlines()) == 2
