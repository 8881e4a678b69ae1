"""`~` in a path flag is the home folder, as in tensor2tensor's commands: a shell leaves
`--output_dir=~/runs/x` as typed, which would otherwise name a folder `~` here."""

from absl import flags

from conftest import run_module
from t2t_repro.cli.entry_point import expand_home


def test_a_leading_tilde_of_each_path_is_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    flag_values = flags.FlagValues()
    flags.DEFINE_string("output_dir", None, "", flag_values=flag_values)
    flags.DEFINE_string("checkpoint_path", None, "", flag_values=flag_values)
    flags.DEFINE_list("vocabs", None, "", flag_values=flag_values)
    flags.DEFINE_string("data_dir", None, "", flag_values=flag_values)
    flags.DEFINE_string("hparams", "", "", flag_values=flag_values)  # not a path
    flag_values(["program", "--output_dir=~/runs/x", "--checkpoint_path=~/a,/b/c~,~/d",
                 "--vocabs=~/v.yml,w.yml", "--hparams=name=~/x"])
    expand_home(flag_values)
    assert flag_values.output_dir == f"{tmp_path}/runs/x"
    assert flag_values.checkpoint_path == f"{tmp_path}/a,/b/c~,{tmp_path}/d"
    assert flag_values.vocabs == [f"{tmp_path}/v.yml", "w.yml"]
    assert flag_values.data_dir is None
    assert flag_values.hparams == "name=~/x"


def test_a_command_reads_the_files_a_tilde_names(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "out.de").write_text("Ein Mann reitet ein Pferd.\n", encoding="utf-8")
    result = run_module("t2t_repro.bleu", "--translation=~/out.de", "--reference=~/out.de")
    assert result.returncode == 0, result.stderr
    assert "= 100.00 100.0/100.0/100.0/100.0" in result.stdout
