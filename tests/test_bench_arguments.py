"""The benchmarks' argument types: a number out of its range, or a list naming nothing, is a
usage error naming the flag before anything loads."""

import argparse

import pytest

from t2t_repro.bench.arguments import (comma_list, non_negative_float, non_negative_int,
                                       one_of, positive_float, positive_int)


@pytest.mark.parametrize("parse, text, value", [
    (positive_int, "1", 1), (positive_int, "500", 500), (non_negative_int, "0", 0),
    (positive_float, "0.5", 0.5), (non_negative_float, "0", 0.0),
    (comma_list(positive_int), "1, 4,8,", [1, 4, 8]),
    (comma_list(non_negative_float), "0,1.4", [0.0, 1.4]),
    (comma_list(one_of("float32", "mixed_bfloat16")), "mixed_bfloat16,float32",
     ["mixed_bfloat16", "float32"]),
])
def test_values_in_range_parse(parse, text, value):
    assert parse(text) == value


@pytest.mark.parametrize("parse, text, message", [
    (positive_int, "0", "must be a whole number of at least 1, got '0'"),
    (positive_int, "-3", "must be a whole number of at least 1, got '-3'"),
    (positive_int, "2.5", "must be a whole number of at least 1, got '2.5'"),
    (non_negative_int, "-1", "must be a whole number of at least 0, got '-1'"),
    (positive_float, "0", "must be a number above 0, got '0'"),
    (non_negative_float, "x", "must be a number of at least 0, got 'x'"),
    (comma_list(positive_int), "4,0", "must be a whole number of at least 1, got '0'"),
    (comma_list(positive_int), " , ", "names no value"),
    (comma_list(one_of("float32", "mixed_bfloat16")), "float32,mixed_float16",
     "must be one of float32, mixed_bfloat16, got 'mixed_float16'"),
])
def test_values_out_of_range_are_refused_saying_what_is_wanted(parse, text, message):
    with pytest.raises(argparse.ArgumentTypeError) as error:
        parse(text)
    assert str(error.value) == message


def usage_error_of(main, argv, capsys):
    """What `main(argv)` writes on stderr, asserting it exits with status 1, as every command's
    one-line error does."""
    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 1
    return capsys.readouterr().err


def test_a_benchmark_refuses_a_count_out_of_range_before_loading_anything(capsys):
    """Exit status 1 and argparse's usage error in one line, not an IndexError once the data
    is read."""
    from t2t_repro.bench import decode

    assert usage_error_of(decode.main, ["--sentences=0"], capsys) == (
        "error: python -m t2t_repro.bench decode: argument --sentences: must be a whole number "
        "of at least 1, got '0' (--help lists the flags)\n")


@pytest.mark.parametrize("flags, backend, rest", [
    (["--steps=2"], "tensorflow", ["--steps=2"]),
    (["--steps", "2", "--backend=jax", "--skip_peer"], "jax", ["--steps", "2", "--skip_peer"]),
    (["--backend", "jax", "--steps=2"], "jax", ["--steps=2"]),
    (["--backend", "tensorflow"], "tensorflow", []),
    (["--backends=jax"], "tensorflow", ["--backends=jax"]),  # bench packing's flag
])
def test_the_backend_flag_is_taken_out_in_either_form(flags, backend, rest):
    from t2t_repro.bench.__main__ import split_backend_flag

    assert split_backend_flag(flags) == (backend, rest)


BENCHMARK_NAMES = "decode, packing, pipeline, search, serve, train"


@pytest.mark.parametrize("argv, message", [
    ([], f"name a benchmark first: {BENCHMARK_NAMES}"),
    (["decoding"], f"name a benchmark first: {BENCHMARK_NAMES}"),
    (["decode", "--backend", "jax"],
     "bench decode has no --backend=jax; it runs on TensorFlow (leave --backend out)"),
    # argparse then lists the choices, quoted or not by Python's version.
    (["train", "--backend=pytorch"], "argument --backend: invalid choice: 'pytorch'"),
    (["train", "--backend"], "argument --backend: expected one argument"),
])
def test_a_benchmark_or_backend_it_lacks_is_a_one_line_usage_error(capsys, argv, message):
    from t2t_repro.bench.__main__ import main

    error = usage_error_of(main, ["bench", *argv], capsys)
    assert error.startswith(f"error: python -m t2t_repro.bench: {message}")
    assert error.endswith(" (--help lists the flags)\n") and error.count("\n") == 1


def test_help_lists_the_benchmarks(capsys):
    from t2t_repro.bench.__main__ import main

    main(["bench", "--help"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"benchmarks: {BENCHMARK_NAMES}"
    assert lines[-2] == ("--backend=jax runs `train` under JAX, with flags of its own: "
                         "python -m t2t_repro.bench train --backend=jax --help")


def test_the_tensorflow_training_benchmarks_help_points_at_the_jax_ones_flags(capsys):
    from t2t_repro.bench import train

    with pytest.raises(SystemExit) as exit:
        train.main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert exit.value.code == 0
    assert help_text.endswith("--backend=jax runs `train` under JAX, with flags of its own: "
                              "python -m t2t_repro.bench train --backend=jax --help")


def test_the_tensorflow_backend_named_reaches_the_benchmarks_own_parser(capsys):
    from t2t_repro.bench.__main__ import main

    assert "argument --sentences: must be a whole number of at least 1" in usage_error_of(
        main, ["bench", "decode", "--backend", "tensorflow", "--sentences=0"], capsys)


@pytest.mark.parametrize("precisions, message", [
    ("float8", "must be one of bfloat16, int8, got 'float8'"),
    ("bfloat16,float32", "must be one of bfloat16, int8, got 'float32'"),  # always measured
])
def test_the_decode_benchmark_refuses_an_unknown_precision_before_loading_anything(
        capsys, precisions, message):
    """Not a ValueError traceback from the precision's decoder process, 23 s in."""
    from t2t_repro.bench import decode

    assert usage_error_of(decode.main, [f"--precisions={precisions}"], capsys) == (
        f"error: python -m t2t_repro.bench decode: argument --precisions: {message} (--help "
        f"lists the flags)\n")


@pytest.mark.parametrize("flag, message", [
    ("--backends=torch", "argument --backends: must be one of tensorflow, jax, got 'torch'"),
    ("--batch_tokens=4096,100",
     "argument --batch_tokens: must be a whole number of at least 256, got '100'"),
])
def test_the_packing_benchmark_refuses_what_it_cannot_time_before_loading_anything(
        capsys, flag, message):
    """Not a KeyError, or a ValueError about the batch size, once the data is encoded."""
    from t2t_repro.bench import packing

    assert usage_error_of(packing.main, [flag], capsys) == (
        f"error: python -m t2t_repro.bench packing: {message} (--help lists the flags)\n")


def test_no_precisions_is_a_list_of_none():
    parse = comma_list(one_of("bfloat16", "int8"), may_be_empty=True)
    assert parse("") == [] and parse("int8,bfloat16") == ["int8", "bfloat16"]


@pytest.mark.parametrize("flag", ["--helpshort", "--helpfull", "--help"])
def test_absl_help_flags_print_a_benchmarks_help(capsys, flag):
    from t2t_repro.bench import decode

    with pytest.raises(SystemExit) as exit:
        decode.main([flag])
    assert exit.value.code == 0 and "--precisions" in capsys.readouterr().out


def test_the_jax_training_benchmark_refuses_a_dtype_its_peer_lacks(capsys):
    """mixed_float16 trains under JAX, but the PyTorch peer would run it in float32: refused
    before anything loads, not measured against another precision."""
    from t2t_repro.bench import train_jax

    assert usage_error_of(train_jax.main, ["--dtypes=float32,mixed_float16"], capsys) == (
        "error: python -m t2t_repro.bench train --backend=jax: argument --dtypes: must be one "
        "of float32, mixed_bfloat16, got 'mixed_float16' (--help lists the flags)\n")


def test_a_data_root_without_the_shared_data_is_an_error_naming_the_file_wanted(tmp_path):
    """Not "[Errno 2] No such file or directory" (bench train, bench packing)."""
    from t2t_repro.bench.newstest import newstest2014
    from t2t_repro.errors import ConfigurationError

    with pytest.raises(ConfigurationError) as error:
        newstest2014(str(tmp_path), "en")
    assert str(error.value) == (f"{tmp_path}/wmt14_ende/newstest2014.en not found; point "
                                f"--data_root at the shared data.")


def test_the_serving_benchmark_names_a_missing_export_before_its_sentences(tmp_path):
    from t2t_repro.bench import serve
    from t2t_repro.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=rf"^--export_dir={tmp_path}/none is not a "
                                                 rf"folder; export a run first"):
        serve.main([f"--export_dir={tmp_path}/none", f"--sentences_file={tmp_path}/none.txt"])
