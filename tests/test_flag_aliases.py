"""tensor2tensor's flag names accepted where they mean the same as ours."""

import pytest
from absl import flags

from conftest import run_module
from t2t_repro.cli.entry_point import FlagAlias, apply_flag_aliases
from t2t_repro.errors import ConfigurationError


def parsed(*argv):
    flag_values = flags.FlagValues()
    flags.DEFINE_float("save_checkpoints_minutes", 10.0, "", flag_values=flag_values)
    flags.DEFINE_integer("save_checkpoints_secs", None, "", flag_values=flag_values)
    flag_values(["program", *argv])
    return flag_values


SECONDS = FlagAlias("save_checkpoints_secs", "save_checkpoints_minutes", lambda s: s / 60)


@pytest.mark.parametrize("argv, minutes", [
    ((), 10.0),
    (("--save_checkpoints_secs=90",), 1.5),
    (("--save_checkpoints_secs=0",), 0.0),
    (("--save_checkpoints_secs=120", "--save_checkpoints_minutes=2"), 2.0),
])
def test_an_alias_sets_its_canonical_flag_converted(argv, minutes):
    flag_values = parsed(*argv)
    apply_flag_aliases([SECONDS], flag_values)
    assert flag_values.save_checkpoints_minutes == minutes


def test_an_alias_and_its_flag_with_different_values_is_an_error():
    flag_values = parsed("--save_checkpoints_secs=60", "--save_checkpoints_minutes=2")
    with pytest.raises(ConfigurationError,
                       match=r"--save_checkpoints_secs=60 \(tensor2tensor's name "
                             r"for --save_checkpoints_minutes.*contradicts"):
        apply_flag_aliases([SECONDS], flag_values)


@pytest.mark.parametrize("module, args, message", [
    ("t2t_repro.trainer", ["--local_eval_frequency=5", "--eval_every=6"], "--eval_every=6"),
    ("t2t_repro.trainer", ["--log_step_count_steps=5", "--log_every=6"], "--log_every=6"),
    ("t2t_repro.trainer", ["--xla_compile", "--nojit_compile"], "--jit_compile=False"),
    ("t2t_repro.avg_checkpoints", ["--num_last_checkpoints=3", "--n=2"], "--n=2"),
])
def test_every_entry_point_refuses_contradicting_aliases(tmp_path, module, args, message):
    result = run_module(module, f"--output_dir={tmp_path}", *args)
    assert result.returncode != 0
    assert "contradicts" in result.stderr and message in result.stderr, result.stderr


@pytest.mark.parametrize("seconds", ["0", "-1"])
def test_an_alias_holds_its_flags_bounds(seconds):
    """Not "no server at ...", the answer to --timeout_secs=0 before (the server is never
    asked)."""
    result = run_module("t2t_repro.query", "--server=http://127.0.0.1:9", "--model_name=m",
                        f"--timeout_secs={seconds}", input="x\n")
    assert result.returncode == 1 and result.stderr.strip() == (
        f"error: --timeout_secs={float(seconds)} (tensor2tensor's name for --timeout): "
        f"{float(seconds)} is not number >= 0.001.")


def test_avg_checkpoints_takes_num_last_checkpoints_as_n(tmp_path):
    """Agreeing values pass the check and reach the work (here: no checkpoints to average)."""
    result = run_module("t2t_repro.avg_checkpoints", f"--output_dir={tmp_path}",
                        "--num_last_checkpoints=2", "--n=2")
    assert "No checkpoints" in result.stderr, result.stderr
