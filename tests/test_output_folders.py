"""Every command that writes a folder checks it before any work: a folder under a file, in a
read-only folder, or a symbolic link to nothing, is a one-line error naming the flag, and nothing
is written anywhere."""

import contextlib
import os

import pytest

from conftest import read_only_folder, run_module

RUN_FLAGS = "--problem=algorithmic_copy\n--hparams_set=transformer_tiny\n"

# (command, its other flags, the flag naming the folder it writes); {run}: a run folder.
COMMANDS = {
    "datagen": ("t2t_repro.datagen", ["--problem=algorithmic_copy"], "--data_dir"),
    "trainer --generate_data": ("t2t_repro.trainer", [
        "--problem=algorithmic_copy", "--hparams_set=transformer_tiny", "--generate_data",
        "--output_dir={run}/new_run"], "--data_dir"),
    "exporter": ("t2t_repro.exporter", ["--output_dir={run}"], "--export_dir"),
    "exporter ctranslate2": ("t2t_repro.exporter", [
        "--output_dir={run}", "--export_format=ctranslate2"], "--export_dir"),
    "export_ctranslate2": ("t2t_repro.export_ctranslate2", ["--output_dir={run}"], "--ct2_dir"),
    "avg_checkpoints": ("t2t_repro.avg_checkpoints", ["--output_dir={run}"], "--avg_dir"),
    "visualize": ("t2t_repro.visualize", ["--output_dir={run}", "--inputs=1 2 3"],
                  "--plot_dir"),
    "import_model": ("t2t_repro.import_model", [
        "--format=opus_mt", "--model_dir={run}", "--source_language=de",
        "--target_language=en"], "--output_dir"),
}


def tree(folder):
    return sorted(os.path.relpath(os.path.join(parent, name), folder)
                  for parent, folders, files in os.walk(folder) for name in folders + files)


@pytest.mark.parametrize("case", ["under_file", "read_only", "dangling_link"])
@pytest.mark.parametrize("command", COMMANDS)
def test_an_output_folder_that_cannot_be_written_is_one_line_before_any_work(
        tmp_path, command, case):
    module, flags, output_flag = COMMANDS[command]
    run = tmp_path / "run"
    run.mkdir()
    (run / "flags.txt").write_text(RUN_FLAGS)
    file = tmp_path / "file"
    file.write_text("not a folder\n")
    (tmp_path / "link").symlink_to(tmp_path / "gone")
    with contextlib.ExitStack() as stack:
        read_only = stack.enter_context(read_only_folder(tmp_path / "read_only"))
        before = tree(tmp_path)
        output = {"under_file": file / "out", "read_only": read_only / "out",
                  "dangling_link": tmp_path / "link"}[case]
        result = run_module(module, *[flag.format(run=run) for flag in flags],
                            f"{output_flag}={output}")
        assert tree(tmp_path) == before
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    [error] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    reason = {"under_file": f"cannot be created: {file} is a file, not a folder.",
              "read_only": f"cannot be written: {read_only} is read-only",
              "dangling_link": f"is a symbolic link to {tmp_path / 'gone'}, which does not "
                               f"exist; create that folder, or name another."}[case]
    assert error.startswith(f"error: {output_flag}={output} {reason}"), error


def test_an_output_file_the_run_or_its_data_keeps_is_refused_and_others_are_not(tmp_path):
    """What `--decode_to_file` may not replace: the data's own files (named after the data),
    the run's records; nor may it add a file to the run's subfolders, where it would be read
    as the run's (a checkpoint in best/, say). A decode written before, beside them, may be
    written again, as where an imported run is its own data folder."""
    from t2t_repro.cli.output_paths import check_not_kept
    from t2t_repro.errors import ConfigurationError

    run, data = tmp_path / "run", tmp_path / "data"
    for path in (data / "translate_ende.datagen.json", data / "translate_ende-train-00000-of-00001",
                 run / "best" / "best.json", run / "eval" / "decodes-100.txt",
                 run / "averaged.json", run / "hparams.json", run / "test100.de",
                 data / "translate_endex.txt", data / "notes.txt"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("kept\n")
    (tmp_path / "link.json").symlink_to(data / "translate_ende.datagen.json")
    replaced = {
        data / "translate_ende.datagen.json": f"a file of the translate_ende data in {data}",
        data / "translate_ende-train-00000-of-00001": f"a file of the translate_ende data "
                                                      f"in {data}",
        tmp_path / "link.json": f"a file of the translate_ende data in {data}",
        run / "averaged.json": "the run's averaged.json",
        run / "hparams.json": "the run's hparams.json",
    }
    refused = {path: f"is {what}; writing it would replace it. Name another output file."
               for path, what in replaced.items()}
    for path in (run / "best" / "best.json", run / "best" / "new.de",
                 run / "eval" / "decodes-100.txt"):
        refused[path] = (f"is in the run's {path.parent.name}/, which holds what the run keeps. "
                         f"Name an output file outside it.")
    for path, what in refused.items():
        with pytest.raises(ConfigurationError) as raised:
            check_not_kept(str(path), "--decode_to_file", str(run), str(data), "translate_ende")
        assert str(raised.value) == f"--decode_to_file={path} {what}"
    for path in (run / "test100.de", data / "translate_endex.txt", data / "notes.txt",
                 run / "new.de", data / "new.de"):
        check_not_kept(str(path), "--decode_to_file", str(run), str(data), "translate_ende")
    # An imported run is its own data folder.
    check_not_kept(str(run / "test100.de"), "--decode_to_file", str(run), str(run),
                   "translate_ende")
