"""What the decoder does with awkward input: lines split as the BLEU command and the raw-text
readers split them, lines the problem cannot encode or longer than it takes reported by file and
line, and an input or output file, a checkpoint or decode hparams it cannot use refused in one
line before decoding."""

import os
import shutil

import pytest

from conftest import output_lines, read_only_folder, run_module
from t2t_repro.data.raw_text import read_text_lines

# "\r\n" ends a line; a lone "\r" and U+2028 stay inside theirs (str.split() treats both as
# spaces, so every line encodes); the last line has no "\n".
AWKWARD = b"1 2\r3\n4\r\n5\xe2\x80\xa86\n7"
AWKWARD_LINE_COUNT = 4
BOM = b"\xef\xbb\xbf"  # UTF-8's byte order mark


def tiny_reverse_run(tmp_path_factory, name, hparams):
    """transformer_tiny with `hparams` trained 2 steps on algorithmic_reverse: enough to
    decode with."""
    output_dir = tmp_path_factory.mktemp(name) / "run"
    result = run_module(
        "t2t_repro.trainer", "--problem=algorithmic_reverse", "--hparams_set=transformer_tiny",
        f"--hparams={hparams}", f"--output_dir={output_dir}", "--train_steps=2",
        "--save_checkpoints_steps=2", "--schedule=train",
    )
    assert result.returncode == 0, result.stderr
    return output_dir


@pytest.fixture(scope="module")
def reverse_run(tmp_path_factory):
    return tiny_reverse_run(tmp_path_factory, "decoder_input",
                            "batch_size=256,max_length=24,num_hidden_layers=1")


def run_decoder(output_dir, *args, **kwargs):
    return run_module("t2t_repro.decoder", "--problem=algorithmic_reverse",
                      f"--output_dir={output_dir}", "--decode_hparams=beam_size=1", *args,
                      **kwargs)


def test_decoder_bleu_and_raw_text_count_the_same_lines(reverse_run, tmp_path):
    """A stray "\\r" or U+2028 must not shift one file's lines against another's, and a byte
    order mark opening a file is no part of its first line: algorithmic_reverse could not
    encode "\\ufeff1", and BLEU would count "\\ufeff0" a wrong word."""
    awkward = tmp_path / "awkward.txt"
    awkward.write_bytes(BOM + AWKWARD)
    plain = tmp_path / "plain.txt"
    plain.write_text("".join(f"{number}\n" for number in range(AWKWARD_LINE_COUNT)))
    marked = tmp_path / "marked.txt"
    marked.write_bytes(BOM + plain.read_bytes())
    decodes = tmp_path / "decodes.txt"

    decoder = run_decoder(reverse_run, f"--decode_from_file={awkward}",
                          f"--decode_reference={plain}", f"--decode_to_file={decodes}")
    assert decoder.returncode == 0, decoder.stderr
    assert len(decodes.read_text().split("\n")) - 1 == AWKWARD_LINE_COUNT

    bleu = run_module("t2t_repro.bleu", f"--translation={marked}", f"--reference={plain}")
    assert bleu.returncode == 0, bleu.stderr
    assert " 100.0/" in bleu.stdout.splitlines()[0]  # every word of the translation right

    lines = list(read_text_lines(awkward))
    assert len(lines) == AWKWARD_LINE_COUNT and lines[0] == "1 2\r3"


def decode_text_file(output_dir, tmp_path, text):
    """The decoder's result on a file of `text`, its path and the output file it names."""
    sources = tmp_path / "sources.txt"
    sources.write_text(text)
    decodes = tmp_path / "decodes.txt"
    return (run_decoder(output_dir, f"--decode_from_file={sources}",
                        f"--decode_to_file={decodes}"), sources, decodes)


def test_blank_file_lines_are_counted_apart_from_the_sentences_decoded(reverse_run, tmp_path):
    result, _, decodes = decode_text_file(reverse_run, tmp_path, "1 2 3\n\n \t \n4 5\n")
    assert result.returncode == 0, result.stderr
    assert ("2 of 4 lines are blank: each is answered by an empty line, not decoded."
            in result.stderr.splitlines())
    assert "decoded 2/2 sentences" in result.stderr
    assert f"Wrote 4 decodes to {decodes}." in result.stderr.splitlines()
    assert decodes.read_text().split("\n")[1:3] == ["", ""]


@pytest.mark.parametrize("blank_sources_prefix", ["x", " ".join("1" * 40)])
def test_a_blank_sources_prefix_is_not_read(reverse_run, tmp_path, blank_sources_prefix):
    """A blank source is answered by an empty line whatever its prefix: one the problem cannot
    encode, or longer than any output, stops nothing."""
    sources = tmp_path / "sources.txt"
    sources.write_text("1 2 3\n\n4 5\n")
    prefixes = tmp_path / "prefixes.txt"
    prefixes.write_text(f"3\n{blank_sources_prefix}\n5\n")
    result = run_decoder(reverse_run, f"--decode_from_file={sources}",
                         f"--target_prefix_file={prefixes}")
    assert result.returncode == 0, result.stderr
    first, blank, last = output_lines(result.stdout)
    assert first.startswith("3") and blank == "" and last.startswith("5")


def test_a_file_line_the_problem_cannot_encode_stops_before_decoding(reverse_run, tmp_path):
    result, sources, decodes = decode_text_file(reverse_run, tmp_path, "1 2 3\n4 x 5\n6 7\n")
    assert result.returncode != 0
    assert f"{sources} line 2: algorithmic_reverse accepts only the symbols 0..9" in result.stderr
    assert "'x'" in result.stderr and "Traceback" not in result.stderr
    assert "Decoding with" not in result.stderr and not decodes.exists()


def test_a_stdin_line_the_problem_cannot_encode_is_reported_and_answered_blank(reverse_run):
    result = run_decoder(reverse_run, input="1 2 3\n4 x 5\n6 7\n")
    assert result.returncode == 0, result.stderr
    assert "stdin line 2 skipped: algorithmic_reverse accepts only the symbols" in result.stderr
    lines = output_lines(result.stdout)  # one an input: the skipped one answered blank
    assert len(lines) == 3 and lines[1] == ""


def test_a_stdin_line_that_is_not_utf8_is_reported_and_answered_blank(reverse_run):
    """One line of other bytes ends neither the session nor the lines after it."""
    result = run_module("t2t_repro.decoder", "--problem=algorithmic_reverse",
                        f"--output_dir={reverse_run}", "--decode_hparams=beam_size=1",
                        input=b"1 2 3\n4 \xff 5\n6 7\n")
    assert result.returncode == 0, result.stderr
    assert ("error: stdin line 2 skipped: stdin is not UTF-8 text: line 2 has invalid start "
            "byte at byte 2 of the line; convert the file to UTF-8 (e.g. with iconv)."
            in result.stderr.splitlines())
    assert output_lines(result.stdout) == [
        output_lines(run_decoder(reverse_run, input=f"{line}\n").stdout)[0] if line else ""
        for line in ("1 2 3", "", "6 7")]


@pytest.fixture(scope="module")
def learned_positions_run(tmp_path_factory):
    """A learned-position model whose table holds 8 positions."""
    return tiny_reverse_run(tmp_path_factory, "decoder_input_learned",
                            "batch_size=256,max_length=8,position_encoding=learned")


def test_a_file_line_longer_than_the_position_table_stops_before_decoding(
        learned_positions_run, tmp_path):
    result, sources, decodes = decode_text_file(  # 9 symbols and EOS: 10 positions
        learned_positions_run, tmp_path, "1 2 3\n" + " ".join("1" * 9) + "\n")
    assert result.returncode != 0
    assert f"{sources} line 2: The source has 10 positions" in result.stderr
    assert "max_length=8" in result.stderr and "Traceback" not in result.stderr
    assert not decodes.exists()


def test_a_stdin_line_longer_than_the_position_table_is_reported_and_answered_blank(
        learned_positions_run):
    result = run_decoder(learned_positions_run, input="1 2\n" + " ".join("1" * 9) + "\n3\n")
    assert result.returncode == 0, result.stderr
    assert "stdin line 2 skipped: The source has 10 positions" in result.stderr
    lines = output_lines(result.stdout)  # one an input: the skipped one answered blank
    assert len(lines) == 3 and lines[1] == ""


def error_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@pytest.mark.parametrize("where, named", [
    ("folder", "is a folder; name a file"),
    ("missing_folder", "cannot be written: its folder {tmp_path}/missing does not exist"),
    ("read_only_folder", "cannot be written: {tmp_path}/read_only is read-only"),
])
def test_an_output_file_that_cannot_be_written_is_refused_before_decoding(
        reverse_run, tmp_path, where, named):
    """Nothing is decoded only to be lost at the end, and nothing is left beside the target."""
    sources = tmp_path / "sources.txt"
    sources.write_text("1 2 3\n4 5\n")
    with read_only_folder(tmp_path / "read_only"):
        target = {"folder": tmp_path, "missing_folder": tmp_path / "missing" / "decodes.txt",
                  "read_only_folder": tmp_path / "read_only" / "decodes.txt"}[where]
        result = run_decoder(reverse_run, f"--decode_from_file={sources}",
                             f"--decode_to_file={target}")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    [error] = error_lines(result.stderr)
    assert error.startswith(f"error: --decode_to_file={target} {named.format(tmp_path=tmp_path)}")
    assert "Decoding with" not in result.stderr and "decoded" not in result.stderr
    assert sorted(os.listdir(tmp_path)) == ["read_only", "sources.txt"]
    assert not os.listdir(tmp_path / "read_only")


def test_an_output_file_the_decoder_reads_or_a_checkpoint_is_refused_before_decoding(
        reverse_run, tmp_path):
    """Decodes written over the checkpoint or the run's records would leave a run that no
    command reads; an older checkpoint, which this decode does not read, is no less kept.
    Another file in the run's folder is written as anywhere else."""
    sources = tmp_path / "sources.txt"
    sources.write_text("1 2 3\n")
    run = tmp_path / "run"
    shutil.copytree(reverse_run, run)
    shutil.copy(run / "ckpt-2.weights.h5", run / "ckpt-1.weights.h5")
    before = {path.name: path.read_bytes() for path in run.iterdir() if path.is_file()}
    for name, named in [("ckpt-1.weights.h5", "is a checkpoint"),
                        ("ckpt-2.weights.h5", "is a checkpoint"),
                        ("hparams.json", "is the run's hparams.json file"),
                        ("flags.txt", "is the run's flags.txt file")]:
        result = run_decoder(run, f"--decode_from_file={sources}",
                             f"--decode_to_file={run / name}")
        assert result.returncode == 1 and error_lines(result.stderr) == [
            f"error: --decode_to_file={run / name} {named}; writing it would replace it. Name "
            f"another output file."], result.stderr
    assert {path.name: path.read_bytes() for path in run.iterdir() if path.is_file()} == before
    # A link to a checkpoint, and the records of an average (avg_checkpoints' default folder).
    link = tmp_path / "decodes.link"
    link.symlink_to(run / "ckpt-1.weights.h5")
    averaged = run / "averaged"
    averaged.mkdir()
    for name in ("averaged.json", "hparams.json", "flags.txt"):
        shutil.copy(run / ("hparams.json" if name == "averaged.json" else name), averaged / name)
    kept = {path.name: path.read_bytes() for path in averaged.iterdir()}
    for target, named in [(link, "is a checkpoint"),
                          *((averaged / name, f"is a record of the averaged model in {averaged}")
                            for name in kept)]:
        result = run_decoder(run, f"--decode_from_file={sources}", f"--decode_to_file={target}")
        assert result.returncode == 1 and error_lines(result.stderr) == [
            f"error: --decode_to_file={target} {named}; writing it would replace it. Name "
            f"another output file."], result.stderr
    assert {path.name: path.read_bytes() for path in averaged.iterdir()} == kept
    assert (run / "ckpt-1.weights.h5").read_bytes() == before["ckpt-1.weights.h5"]
    beside = run_decoder(run, f"--decode_from_file={sources}",
                         f"--decode_to_file={run / 'decodes.txt'}")
    assert beside.returncode == 0 and (run / "decodes.txt").read_text().count("\n") == 1


def test_hparams_without_a_set_are_checked_against_the_runs_as_with_one(reverse_run, tmp_path):
    """--hparams alone applies to the run's saved hparams: what it leaves as saved decodes as
    the run does; another model hparam is refused naming it, as with --hparams_set; an unknown
    name is refused (all were ignored)."""
    lines = "1 2\n3 4 5\n"
    as_saved = run_decoder(reverse_run, "--hparams=num_hidden_layers=1", input=lines)
    assert as_saved.returncode == 0, as_saved.stderr
    assert output_lines(as_saved.stdout) == output_lines(run_decoder(reverse_run,
                                                                     input=lines).stdout)
    deeper = run_decoder(reverse_run, "--hparams=num_hidden_layers=2", input=lines)
    assert deeper.returncode == 1 and error_lines(deeper.stderr) == [
        f"error: {reverse_run} holds a run trained with other hparams: num_hidden_layers=2 "
        f"(the run's 1). Leave out --hparams_set and the --hparams that change them, and the model "
        f"is read with its own ({reverse_run}/hparams.json)."]
    unknown = run_decoder(reverse_run, "--hparams=num_hiden_layers=2", input=lines)
    assert unknown.returncode == 1 and len(error_lines(unknown.stderr)) == 1
    assert "num_hiden_layers" in error_lines(unknown.stderr)[0]


LONG_SOURCE = " ".join("1" * 30)  # 30 symbols and EOS: 31 tokens, over max_length=24


def test_a_file_line_over_max_input_tokens_stops_before_decoding(reverse_run, tmp_path):
    """The limit defaults to hparam max_length (24 here) and --max_input_tokens raises it."""
    refused, sources, decodes = decode_text_file(reverse_run, tmp_path,
                                                 f"1 2 3\n{LONG_SOURCE}\n")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    [error] = error_lines(refused.stderr)
    assert error.startswith(f"error: {sources} line 2: the source has 31 tokens (EOS included), "
                            f"more than the decoder takes: max_input_tokens=24")
    assert "Decoding with" not in refused.stderr and not decodes.exists()

    raised = run_decoder(reverse_run, f"--decode_from_file={sources}",
                         f"--decode_to_file={decodes}", "--max_input_tokens=31")
    assert raised.returncode == 0, raised.stderr
    assert len(decodes.read_text().splitlines()) == 2


def test_a_stdin_line_over_max_input_tokens_is_reported_and_answered_blank(reverse_run):
    result = run_decoder(reverse_run, input=f"1 2\n{LONG_SOURCE}\n3\n")
    assert result.returncode == 0, result.stderr
    assert "stdin line 2 skipped: the source has 31 tokens" in result.stderr
    lines = output_lines(result.stdout)  # one an input: the skipped one answered blank
    assert len(lines) == 3 and lines[1] == ""


@pytest.mark.parametrize("name, content", [("notes.txt", b"not a checkpoint\n"),
                                           ("ckpt-2.weights.h5", b"\x89HDF\r\n cut short")])
def test_a_checkpoint_path_that_is_no_checkpoint_is_a_one_line_error(reverse_run, tmp_path,
                                                                       name, content):
    path = tmp_path / name
    path.write_bytes(content)
    result = run_decoder(reverse_run, f"--checkpoint_path={path}", input="1 2\n")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    [error] = error_lines(result.stderr)
    assert error.startswith(f"error: --checkpoint_path={path} is not a checkpoint")


def test_a_relative_path_an_older_run_recorded_is_named_when_nothing_here_matches_it(
        reverse_run, tmp_path, monkeypatch):
    """Runs once recorded paths as given. A relative --data_dir that names nothing from the
    working folder is a one-line error saying so, not a search for data there; given, the
    flag is used, there being nothing to compare it with. Read for another purpose (here an
    ensemble member's vocabulary), it is an error too."""
    import shutil

    run = tmp_path / "older_run"
    shutil.copytree(reverse_run, run)
    flags_path = run / "flags.txt"
    lines = [line for line in flags_path.read_text().splitlines()
             if not line.startswith("--data_dir=")]
    flags_path.write_text("".join(line + "\n" for line in [*lines, "--data_dir=data"]))
    monkeypatch.chdir(tmp_path)
    refused = run_decoder(run, input="1 2\n")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    [error] = error_lines(refused.stderr)
    assert error == (f"error: {flags_path} records --data_dir=data, relative to the folder the "
                     f"run was trained from, and {tmp_path} has no such path; run the command "
                     f"from that folder, or give --data_dir.")
    given = run_decoder(run, f"--data_dir={tmp_path / 'elsewhere'}", input="1 2\n")
    assert given.returncode == 0, given.stderr
    member = run_decoder(reverse_run, f"--checkpoint_path={reverse_run},{run}", input="1 2\n")
    assert member.returncode == 1 and "Traceback" not in member.stderr, member.stderr
    [error] = error_lines(member.stderr)
    assert error.startswith(f"error: {flags_path} records --data_dir=data, relative to the "
                            f"folder the run was trained from, and {tmp_path} has no such path")


def test_a_checkpoint_of_a_run_with_other_hparams_is_a_one_line_error_naming_them(
        reverse_run, learned_positions_run):
    checkpoint = learned_positions_run / "ckpt-2.weights.h5"
    result = run_decoder(reverse_run, f"--checkpoint_path={checkpoint}", input="1 2\n")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    [error] = error_lines(result.stderr)
    assert error.startswith(f"error: {checkpoint} does not fit this model, whose hparams "
                            f"differ from those of its run {learned_positions_run}: "
                            f"num_hidden_layers=1 (its run 2), position_encoding=sinusoidal "
                            f"(its run learned);")


def test_a_checkpoint_copied_out_of_its_run_decodes_with_the_hparams_stored_in_it(
        reverse_run, learned_positions_run, tmp_path):
    """No --hparams_set needed, alone or as an ensemble member beside a run of other hparams;
    a set of other model hparams is refused naming what differs."""
    copied = tmp_path / "copied" / "ckpt-2.weights.h5"
    copied.parent.mkdir()
    shutil.copy(learned_positions_run / "ckpt-2.weights.h5", copied)
    in_its_run = run_decoder(learned_positions_run, input="1 2\n3 4 5\n")
    assert in_its_run.returncode == 0, in_its_run.stderr
    assert len(output_lines(in_its_run.stdout)) == 2
    alone = run_decoder(copied.parent, input="1 2\n3 4 5\n")
    assert alone.returncode == 0, alone.stderr
    assert output_lines(alone.stdout) == output_lines(in_its_run.stdout)
    assert (f"Using the model hparams stored in {copied} (no --hparams_set given)."
            in alone.stderr)
    with_itself = run_decoder(reverse_run, f"--checkpoint_path={copied},{copied}",
                              input="1 2\n3 4 5\n")
    assert with_itself.returncode == 0, with_itself.stderr
    assert output_lines(with_itself.stdout) == output_lines(in_its_run.stdout)
    other_set = run_decoder(copied.parent, "--hparams_set=transformer_tiny",
                            "--hparams=max_length=8", input="1 2\n")
    assert other_set.returncode == 1 and "Traceback" not in other_set.stderr, other_set.stderr
    [error] = error_lines(other_set.stderr)
    assert error.startswith(f"error: {copied} does not fit this model, whose hparams differ "
                            f"from those stored in it: position_encoding=sinusoidal (stored "
                            f"learned);")


def test_no_ensemble_members_run_loses_a_file_to_the_decode_to_file(
        reverse_run, learned_positions_run, tmp_path):
    """--decode_to_file may replace no record of the run of any checkpoint decoded (here the
    second member's), add no file to its subfolders, and be named as no checkpoint: each a
    one-line error before decoding, the file as it was."""
    source = tmp_path / "source.txt"
    source.write_text("1 2\n")
    member = learned_positions_run
    assert (member / "train").is_dir()  # its TensorBoard events
    refused = {
        member / "hparams.json": "is the run's hparams.json; writing it would replace it. "
                                 "Name another output file.",
        member / "flags.txt": "is the run's flags.txt; writing it would replace it. Name "
                              "another output file.",
        member / "train" / "decodes.txt": "is in the run's train/, which holds what the run "
                                          "keeps. Name an output file outside it.",
        member / "ckpt-9.weights.h5": "is named as a checkpoint (*.weights.h5), and commands "
                                      "would read it as one. Name another output file.",
    }
    for path, what in refused.items():
        before = path.read_bytes() if path.exists() else None
        result = run_decoder(reverse_run, f"--checkpoint_path={reverse_run},{member}",
                             f"--decode_from_file={source}", f"--decode_to_file={path}")
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert error_lines(result.stderr) == [f"error: --decode_to_file={path} {what}"]
        assert (path.read_bytes() if path.exists() else None) == before


def test_a_checkpoint_path_alone_names_its_run_or_else_the_folder_holding_it(
        reverse_run, learned_positions_run, tmp_path):
    """Without --output_dir: the run the one checkpoint belongs to, whose flags.txt names the
    problem; outside any run, the folder holding it, decoded with the problem and hparams
    stored in it (another problem is refused); an ensemble's first member names its run or
    folder, and the ensemble decodes as with that --output_dir given; neither flag is an error
    naming both; a file that is no checkpoint, alone or as a member, is refused as such, not as
    a folder without flags.txt."""
    lines = "1 2\n3 4 5\n"

    def decoded_without_output_dir(checkpoint_path):
        return run_module("t2t_repro.decoder", f"--checkpoint_path={checkpoint_path}",
                          "--decode_hparams=beam_size=1", input=lines)

    checkpoint = reverse_run / "ckpt-2.weights.h5"
    in_its_run = run_decoder(reverse_run, input=lines)
    by_its_run = decoded_without_output_dir(checkpoint)
    assert by_its_run.returncode == 0, by_its_run.stderr
    assert output_lines(by_its_run.stdout) == output_lines(in_its_run.stdout)
    assert (f"Using --output_dir={reverse_run}, the run --checkpoint_path={checkpoint} belongs "
            f"to." in by_its_run.stderr)
    assert f"Using --problem=algorithmic_reverse from {reverse_run / 'flags.txt'}." in (
        by_its_run.stderr)

    copied = tmp_path / "copied" / "ckpt-2.weights.h5"
    copied.parent.mkdir()
    shutil.copy(learned_positions_run / "ckpt-2.weights.h5", copied)
    learned = run_decoder(learned_positions_run, input=lines)
    alone = decoded_without_output_dir(copied.parent)
    assert alone.returncode == 0, alone.stderr
    assert output_lines(alone.stdout) == output_lines(learned.stdout)
    assert (f"Using --output_dir={copied.parent}, the folder holding {copied}."
            in alone.stderr)
    assert f"Using --problem=algorithmic_reverse stored in {copied}." in alone.stderr
    assert (f"Using the model hparams stored in {copied} (no --hparams_set given)."
            in alone.stderr)
    other_problem = run_module("t2t_repro.decoder", f"--checkpoint_path={copied}",
                               "--problem=algorithmic_copy", input=lines)
    assert other_problem.returncode == 1 and error_lines(other_problem.stderr) == [
        f"error: {copied} was trained on --problem=algorithmic_reverse, not algorithmic_copy; "
        f"read it with --problem=algorithmic_reverse, or name a checkpoint of algorithmic_copy."]

    for members, named, its_folder in (
            ((checkpoint, copied), f"the run the first --checkpoint_path member {checkpoint} "
                                   f"belongs to", reverse_run),
            ((copied, checkpoint), f"the folder holding {copied}", copied.parent)):
        ensemble = ",".join(map(str, members))
        given = run_decoder(reverse_run, f"--checkpoint_path={ensemble}", input=lines)
        alone = decoded_without_output_dir(ensemble)
        assert given.returncode == 0 and alone.returncode == 0, alone.stderr
        assert output_lines(alone.stdout) == output_lines(given.stdout)
        assert f"Using --output_dir={its_folder}, {named}." in alone.stderr, alone.stderr
    neither = run_module("t2t_repro.decoder", "--problem=algorithmic_reverse", input=lines)
    assert neither.returncode == 1 and "Traceback" not in neither.stderr, neither.stderr
    assert error_lines(neither.stderr) == [
        "error: missing --output_dir; name the trained run, or give --checkpoint_path; see "
        "--helpfull."]

    notes = tmp_path / "notes.txt"
    notes.write_text("not weights\n")
    for named, named_as in ((notes, f"--checkpoint_path={notes}"),
                            (f"{notes},{checkpoint}", f"--checkpoint_path member {notes}"),
                            (f"{checkpoint},{notes}", f"--checkpoint_path member {notes}")):
        not_one = run_module("t2t_repro.decoder", f"--checkpoint_path={named}", input=lines)
        assert not_one.returncode == 1 and "Traceback" not in not_one.stderr, not_one.stderr
        assert error_lines(not_one.stderr) == [
            f"error: {named_as} is not a checkpoint (Keras weights in HDF5, named "
            f"ckpt-<step>.weights.h5); name a checkpoint file, or a directory holding one."]


@pytest.mark.parametrize("command, flags", [
    ("t2t_repro.exporter", []), ("t2t_repro.export_ctranslate2", []),
    ("t2t_repro.visualize", ["--inputs=1 2", "--plot_dir={tmp_path}/plots"]),
    ("t2t_repro.avg_checkpoints", []),
])
@pytest.mark.parametrize("with_output_dir", [False, True], ids=["alone", "with --output_dir"])
def test_an_ensemble_is_refused_by_the_commands_that_read_one_checkpoint(
        reverse_run, tmp_path, command, flags, with_output_dir):
    """At once, before any notice or folder: only the decoder takes several checkpoints."""
    ensemble = f"{reverse_run},{reverse_run / 'ckpt-2.weights.h5'}"
    before = sorted(os.listdir(reverse_run))
    result = run_module(command, f"--checkpoint_path={ensemble}",
                        *([f"--output_dir={reverse_run}"] if with_output_dir else []),
                        *[flag.format(tmp_path=tmp_path) for flag in flags])
    assert result.returncode == 1 and result.stderr == (
        f"error: --checkpoint_path={ensemble} names several checkpoints (an ensemble), which "
        f"only the decoder takes; name one.\n")
    assert sorted(os.listdir(reverse_run)) == before and os.listdir(tmp_path) == []


@pytest.mark.parametrize("flag", ["--decode_from_file", "--decode_reference",
                                  "--target_prefix_file", "--score_file"])
def test_an_input_file_that_cannot_be_read_is_a_one_line_error_naming_its_flag(
        reverse_run, tmp_path, flag):
    sources, missing = tmp_path / "sources.txt", tmp_path / "absent.txt"
    sources.write_text("1 2\n")
    earlier_output = tmp_path / "decodes.txt"  # compared with the inputs: not a missing one
    earlier_output.write_text("2 1\n")
    given = {flag: missing} if flag in ("--decode_from_file", "--score_file") else {
        "--decode_from_file": sources, flag: missing}
    # Scoring reads no beam size: run_decoder's beam_size=1 would be refused first.
    searchless = ["--decode_hparams="] if flag == "--score_file" else []
    result = run_decoder(reverse_run, *(f"{name}={path}" for name, path in given.items()),
                         f"--decode_to_file={earlier_output}", *searchless)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert error_lines(result.stderr) == [
        f"error: cannot read {flag}={missing}: No such file or directory."]
    assert "Decoding with" not in result.stderr


@pytest.mark.parametrize("overrides, message", [
    ("beam_size=0", "decode hparam beam_size=0 must be at least 1 (1: greedy)."),
    ("beam_size=-2", "decode hparam beam_size=-2 must be at least 1 (1: greedy)."),
    ("beam_size=4,alpha=-0.5", "decode hparam alpha=-0.5 must be at least 0 (0: no length "
                               "penalty)."),
    ("batch_size=0", "decode hparam batch_size=0 must be at least 1 sentence."),
    ("beam_size=4,extra_length=-3", "decode hparam extra_length=-3 must be at least 0 (0: "
                                    "outputs at most the source's length)."),
])
def test_decode_hparams_no_search_runs_with_are_a_one_line_error(reverse_run, tmp_path,
                                                                 overrides, message):
    """Checked where the decode hparams are made, so the decoder, the exporter and the
    trainer's decoding evaluation refuse them alike."""
    sources = tmp_path / "sources.txt"
    sources.write_text("1 2\n3 4 5\n")
    for command, args in (("t2t_repro.decoder", [f"--decode_from_file={sources}"]),
                          ("t2t_repro.exporter", [f"--export_dir={tmp_path / 'export'}"])):
        result = run_module(command, "--problem=algorithmic_reverse",
                            f"--output_dir={reverse_run}", f"--decode_hparams={overrides}",
                            *args)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        [error] = error_lines(result.stderr)
        assert error.startswith(f"error: {message}"), error
    assert not (tmp_path / "export").exists()


@pytest.mark.parametrize("flag, message", [
    ("--decode_hparams=beam_size=1,alignment_layer=0",
     "decode hparam alignment_layer=0 applies only with return_alignments=true; add "
     "return_alignments=true to --decode_hparams, or leave it out."),
    ("--decode_hparams=beam_size=1,sampling_temp=0.5",
     "decode hparam sampling_temp=0.5 applies only with sampling_method=random; add "
     "sampling_method=random to --decode_hparams, or leave it out."),
    ("--decode_reference={file}",
     "--decode_reference needs --decode_from_file, the sources its lines are aligned with."),
    ("--target_prefix_file={file}",
     "--target_prefix_file needs --decode_from_file, the sources its lines are aligned with."),
])
def test_a_setting_the_search_would_ignore_is_a_one_line_error(reverse_run, tmp_path, flag,
                                                               message):
    """Decoding standard input, or without sampling or alignments, nothing reads them."""
    lines = tmp_path / "lines.txt"
    lines.write_text("1 2\n")
    result = run_decoder(reverse_run, flag.format(file=lines), input="3 4\n")
    assert result.returncode == 1 and error_lines(result.stderr) == [f"error: {message}"], (
        result.stderr)


def test_a_run_folder_that_does_not_exist_is_named_as_such(tmp_path):
    missing = tmp_path / "no_run"
    result = run_module("t2t_repro.decoder", f"--output_dir={missing}", input="1 2\n")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert error_lines(result.stderr) == [
        f"error: missing --problem; --output_dir={missing} does not exist, so no flags.txt "
        f"names one; see --helpfull."]


@pytest.mark.parametrize("flag", ["--decode_from_file", "--decode_reference",
                                  "--target_prefix_file", "--score_file"])
def test_an_output_file_that_is_an_input_is_refused_before_it_is_replaced(reverse_run, tmp_path,
                                                                          flag):
    sources = tmp_path / "sources.txt"
    sources.write_text("1 2\n")
    given = tmp_path / "given.txt"
    given.write_text("3 4\n")
    inputs = {flag: given} if flag in ("--decode_from_file", "--score_file") else {
        "--decode_from_file": sources, flag: given}
    output = f"{tmp_path}/./given.txt"  # the same file, spelt otherwise
    result = run_decoder(reverse_run, *(f"{name}={path}" for name, path in inputs.items()),
                         f"--decode_to_file={output}")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert error_lines(result.stderr) == [
        f"error: --decode_to_file={output} is the {flag} file; writing it would replace it. "
        f"Name another output file."]
    assert given.read_text() == "3 4\n"


def test_a_run_whose_data_folder_moved_decodes_with_the_new_place_given(ende_data_dir, ende_run,
                                                                         tmp_path):
    """flags.txt records the data folder's old place; given its new one, the decoder takes it,
    says so, and decodes as the run does in place."""
    run, gone = tmp_path / "run", tmp_path / "gone"
    run.mkdir()
    for name in ("hparams.json", "ckpt-100.weights.h5"):
        shutil.copy(ende_run / name, run / name)
    (run / "flags.txt").write_text((ende_run / "flags.txt").read_text().replace(
        f"--data_dir={ende_data_dir}\n", f"--data_dir={gone}\n"))
    assert f"--data_dir={gone}\n" in (run / "flags.txt").read_text()
    search = ("--decode_hparams=beam_size=1,extra_length=5",)
    moved = run_module("t2t_repro.decoder", f"--output_dir={run}", f"--data_dir={ende_data_dir}",
                       *search, input="A man rides a horse.\nTwo dogs play.\n")
    in_place = run_module("t2t_repro.decoder", f"--output_dir={ende_run}", *search,
                          input="A man rides a horse.\nTwo dogs play.\n")
    assert moved.returncode == 0, moved.stderr
    assert (f"Using --data_dir={ende_data_dir}: {gone}, which {run / 'flags.txt'} records, is "
            f"gone (moved?); the checkpoint's vocabulary digests check that this is its data."
            in moved.stderr.splitlines())
    assert len(output_lines(moved.stdout)) == 2 and moved.stdout == in_place.stdout
    # Its checkpoint read by a run in place: the vocabulary files it records are gone, and its
    # stored digests vouch for it.
    read_by_another = run_module("t2t_repro.decoder", f"--output_dir={ende_run}",
                                 f"--checkpoint_path={run / 'ckpt-100.weights.h5'}", *search,
                                 input="A man rides a horse.\nTwo dogs play.\n")
    assert read_by_another.returncode == 0, read_by_another.stderr
    assert read_by_another.stdout == in_place.stdout
