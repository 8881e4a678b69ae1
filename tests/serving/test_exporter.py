"""`python -m t2t_repro.exporter` on briefly trained models: the SavedModel, run in a process
of its own that imports only TensorFlow and TensorFlow Text, answers exactly as the decoder CLI
does with the same weights and decode hparams (its score signature as --score_file, served
too); its signatures, input limit, blank inputs, and versions that are never overwritten."""

import json
import os

import numpy as np
import pytest

from conftest import one_line_error, output_lines, run_module

DECODE_HPARAMS = "--decode_hparams=beam_size=2,alpha=0.6,extra_length=5"
SENTENCES = 16
BLANKS = ["", "  \t "]
MAX_INPUT_TOKENS = 40


def decoder_lines(problem_flags, output_dir, source_file, *flags):
    result = run_module("t2t_repro.decoder", *problem_flags, f"--output_dir={output_dir}",
                        DECODE_HPARAMS, f"--decode_from_file={source_file}", *flags)
    assert result.returncode == 0, result.stderr
    return output_lines(result.stdout)


@pytest.fixture(scope="module")
def ende(ende_run, ende_data_dir, shared_data_dir, tmp_path_factory):
    """conftest's ende_run (one-layer transformer_tiny trained 100 steps on Multi30k) exported
    into this module's own folder (the run is shared with other test files and workers); the
    first SENTENCES test_2016_flickr lines, then BLANKS, in a file; and the German references
    of those lines."""
    directory = tmp_path_factory.mktemp("export")
    problem_flags = ["--problem=translate_ende", f"--data_dir={ende_data_dir}"]
    export_dir = directory / "export"
    exported = run_module("t2t_repro.exporter", *problem_flags, f"--output_dir={ende_run}",
                          f"--export_dir={export_dir}",
                          DECODE_HPARAMS, f"--max_input_tokens={MAX_INPUT_TOKENS}")
    assert exported.returncode == 0, exported.stderr
    lines = (shared_data_dir / "multi30k_ende" / "test_2016_flickr.en").read_text(
        encoding="utf-8").splitlines()[:SENTENCES]
    references = (shared_data_dir / "multi30k_ende" / "test_2016_flickr.de").read_text(
        encoding="utf-8").splitlines()[:SENTENCES]
    source_file = directory / "test.en"
    source_file.write_text("".join(line + "\n" for line in lines + BLANKS), encoding="utf-8")
    score_file = directory / "pairs.tsv"
    score_file.write_text("".join(f"{en}\t{de}\n" for en, de in zip(lines, references)),
                          encoding="utf-8")
    return {"flags": problem_flags, "run": ende_run, "lines": lines, "references": references,
            "source_file": source_file, "score_file": score_file,
            "version_dir": export_dir / "100"}


@pytest.fixture(scope="module")
def ende_answers(ende, export_runner):
    too_long = " ".join(["a man rides a horse"] * 20)
    return export_runner(ende["version_dir"], {
        "inputs": ende["lines"] + BLANKS + [too_long],
        "targets": ende["references"] + ["", "Ein Mann."] + [""],
        "failing_pairs": [["A man.", " ".join(["ein Mann reitet ein Pferd"] * 20)]]})


@pytest.fixture(scope="module")
def ende_decodes(ende):
    """The decoder CLI's lines for the source file, with the export's decode hparams."""
    return decoder_lines(ende["flags"], ende["run"], ende["source_file"])


@pytest.fixture(scope="module")
def ende_server(ende):
    """The export served by `python -m t2t_repro.serve` as model "ende"."""
    from t2t_repro.serving.local_server import LocalServer

    with LocalServer([f"--export_dir={ende['version_dir'].parent}", "--model_name=ende"]) as server:
        yield server


def test_the_export_needs_nothing_of_this_package(ende_answers):
    assert ende_answers["project_modules"] == []


def test_outputs_equal_the_decoder_cli(ende_answers, ende_decodes):
    """Blank lines included: both give an empty line."""
    best = ende_answers["signatures"]["serving_default"]
    assert best["outputs"] == ende_decodes
    assert ende_decodes[SENTENCES:] == ["", ""]
    assert len(set(ende_decodes)) >= 5, "the model should write varied sentences"


def test_every_beam_and_score_equal_the_decoder_cli(ende, ende_answers):
    beams = ende_answers["signatures"]["beams"]
    expected = [line.split("\t") for line in decoder_lines(
        ende["flags"], ende["run"], ende["source_file"], "--decode_hparams=beam_size=2,"
        "alpha=0.6,extra_length=5,return_beams=true")]
    assert [row[0::2] for row in expected] == beams["outputs"]
    for row, scores in zip(expected, beams["scores"]):
        assert [float(score) for score in row[1::2]] == pytest.approx(scores, abs=1e-4)
    best = ende_answers["signatures"]["serving_default"]
    assert best["scores"] == [row[0] for row in beams["scores"]]


def test_signatures_take_and_return_strings(ende_answers):
    """The beam width is baked in: the `beams` outputs have 2 columns."""
    specs = {name: answers["specs"] for name, answers in ende_answers["signatures"].items()}
    assert specs == {
        "serving_default": {"inputs": {"inputs": ["string", [None]]},
                            "outputs": {"outputs": ["string", [None]],
                                        "scores": ["float32", [None]]}},
        "beams": {"inputs": {"inputs": ["string", [None]]},
                  "outputs": {"outputs": ["string", [None, 2]],
                              "scores": ["float32", [None, 2]]}},
        "score": {"inputs": {"inputs": ["string", [None]], "targets": ["string", [None]]},
                  "outputs": {"scores": ["float32", [None]], "lengths": ["int32", [None]]}},
    }


def decoder_scores(ende):
    """(score, pieces) of each line of --score_file, as the decoder writes them."""
    result = run_module("t2t_repro.decoder", *ende["flags"], f"--output_dir={ende['run']}",
                        f"--score_file={ende['score_file']}")
    assert result.returncode == 0, result.stderr
    return [(float(score), int(pieces))
            for score, pieces in (line.split("\t") for line in output_lines(result.stdout))]


def test_the_score_signature_equals_the_decoder_score_file(ende, ende_answers):
    score = ende_answers["signatures"]["score"]
    expected = decoder_scores(ende)
    assert score["lengths"][:SENTENCES] == [pieces for _, pieces in expected]
    assert score["scores"][:SENTENCES] == pytest.approx([s for s, _ in expected], abs=1e-4)
    assert len(set(score["lengths"])) >= 5, "real sentences of several lengths"
    # Blank sources are scored too; a blank target is EOS alone.
    import sentencepiece

    pieces = sentencepiece.SentencePieceProcessor(
        model_file=str(ende["version_dir"] / "assets" / "translate_ende.spm.model"))
    assert score["lengths"][SENTENCES:] == [1, len(pieces.encode("Ein Mann.")) + 1]
    assert all(value < 0 for value in score["scores"])


def test_blank_inputs_give_empty_outputs(ende_answers):
    best = ende_answers["signatures"]["serving_default"]
    assert best["outputs"][SENTENCES:] == ["", ""]
    assert best["scores"][SENTENCES:] == [0.0, 0.0]
    assert ende_answers["inputs"][SENTENCES:] == BLANKS


def test_an_input_longer_than_the_limit_is_an_error_naming_it(ende_answers):
    (message,) = ende_answers["errors"].values()
    assert f"more than this model takes: max_input_tokens={MAX_INPUT_TOKENS}" in message
    assert "input 0 has 1" in message  # 100 words: over 100 tokens


def test_a_target_longer_than_the_limit_is_an_error_naming_it(ende_answers):
    """Scoring costs the square of the target's length: a target is held to the limit too."""
    (message,) = ende_answers["score_errors"]
    assert f"more than this model takes: max_input_tokens={MAX_INPUT_TOKENS}" in message
    assert "target 0 has 1" in message  # 100 words: over 100 tokens


def test_a_version_another_exporter_writes_meanwhile_is_an_error_naming_it(tmp_path,
                                                                             monkeypatch):
    """Two exporters of one version: the one that renames its folder second is refused as an
    existing version is, the other's export kept and no temporary folder left."""
    import types

    from t2t_repro.serving import export

    export_dir = tmp_path / "export"
    target = export_dir / "7"

    def save_while_another_exporter_finishes(module, path, **kwargs):
        os.makedirs(path)
        target.mkdir()
        (target / "saved_model.pb").write_text("theirs")

    monkeypatch.setattr(export.tf.saved_model, "save", save_while_another_exporter_finishes)
    module = types.SimpleNamespace(best=None, beams=None, score=None)
    with pytest.raises(export.ExportError) as raised:
        export.write_export(module, str(export_dir), 7, {})
    assert str(raised.value) == (f"{target} already exists; an export version is never "
                                 f"overwritten: write another version, or remove that folder "
                                 f"yourself.")
    assert os.listdir(export_dir) == ["7"] and (target / "saved_model.pb").read_text() == "theirs"


def test_an_export_removes_the_folders_killed_exporters_left_and_no_live_ones(tmp_path,
                                                                              monkeypatch):
    import subprocess
    import sys
    import types

    from t2t_repro.serving import export

    finished = subprocess.Popen([sys.executable, "-c", ""])  # a process id no longer running
    finished.wait()
    export_dir = tmp_path / "export"
    abandoned = export_dir / f".tmp-{finished.pid}-5"
    (abandoned / "variables").mkdir(parents=True)
    being_written = export_dir / f".tmp-{os.getpid()}-6"  # a live exporter's
    being_written.mkdir()
    monkeypatch.setattr(export.tf.saved_model, "save", lambda module, path, **_: os.mkdir(path))
    module = types.SimpleNamespace(best=None, beams=None, score=None)
    export.write_export(module, str(export_dir), 7, {})
    assert sorted(os.listdir(export_dir)) == [being_written.name, "7"]


def test_a_version_is_never_overwritten(ende):
    saved = (ende["version_dir"] / "saved_model.pb").read_bytes()
    again = run_module("t2t_repro.exporter", *ende["flags"], f"--output_dir={ende['run']}",
                       f"--export_dir={ende['version_dir'].parent}")
    assert again.returncode == 1
    assert again.stderr.splitlines()[-1] == (
        f"error: {ende['version_dir']} already exists, and an export is never written over: "
        f"export another checkpoint or pass another --version=N, or remove that folder "
        f"yourself.")
    assert (ende["version_dir"] / "saved_model.pb").read_bytes() == saved
    assert sorted(path.name for path in ende["version_dir"].parent.iterdir()) == ["100"]
    info = json.loads((ende["version_dir"] / "assets.extra" / "export_info.json").read_text())
    assert info["decode_hparams"]["beam_size"] == 2
    assert info["max_input_tokens"] == MAX_INPUT_TOKENS
    assert (ende["version_dir"] / "assets" / "translate_ende.spm.model").is_file()


def test_algorithmic_problem_exports_symbols_to_symbols(export_runner, tmp_path):
    flags = ["--problem=algorithmic_reverse"]
    trained = run_module("t2t_repro.trainer", *flags, "--hparams_set=transformer_tiny",
                         "--hparams=num_hidden_layers=1",  # the export's mechanics: one layer
                         f"--output_dir={tmp_path / 'run'}", "--train_steps=150",
                         "--schedule=train", "--random_seed=1")
    assert trained.returncode == 0, trained.stderr
    exported = run_module("t2t_repro.exporter", *flags, f"--output_dir={tmp_path / 'run'}",
                          DECODE_HPARAMS, "--version=7")
    assert exported.returncode == 0, exported.stderr
    lines = ["3 1 4 1 5", "9 2 6", "0", "5 3 5 8 9 7 9 3 2 3 8 4"]
    answers = export_runner(tmp_path / "run" / "export" / "7", lines + ["3 x 4"])
    source_file = tmp_path / "in.txt"
    source_file.write_text("".join(line + "\n" for line in lines))
    expected = decoder_lines(flags, tmp_path / "run", source_file)
    assert answers["signatures"]["serving_default"]["outputs"] == expected
    assert "accepts only the symbols 0..9" in answers["errors"]["3 x 4"]


def test_the_served_export_answers_as_the_decoder_cli(ende, ende_decodes, ende_server):
    """The export behind `python -m t2t_repro.serve`: sentences sent concurrently in requests
    of 4 (so the server batches them together) come back as the decoder wrote them."""
    from concurrent.futures import ThreadPoolExecutor

    from t2t_repro.serving.client import predict

    requests = [ende["lines"][start:start + 4] for start in range(0, SENTENCES, 4)]
    assert ende_server.version == "100"
    with ThreadPoolExecutor(len(requests)) as pool:
        answers = pool.map(lambda texts: predict(ende_server.url, "ende", texts), requests)
        served = [text for answer in answers for text, _ in answer]
    assert served == ende_decodes[:SENTENCES]


def test_the_server_answers_the_score_signature_as_query_score_prints_it(ende, ende_server):
    """`python -m t2t_repro.query --score` against the served export: the decoder's
    --score_file lines; a line without a tab is an error naming it, after the lines before."""
    expected = decoder_scores(ende)
    query = ["t2t_repro.query", f"--server={ende_server.url}", "--model_name=ende", "--score"]
    served = run_module(*query, f"--inputs_file={ende['score_file']}", "--batch_size=5")
    malformed = run_module(*query, input=f"{ende['lines'][0]}\t{ende['references'][0]}\n"
                                         "no tab here\n")
    assert served.returncode == 0, served.stderr
    answers = [line.split("\t") for line in output_lines(served.stdout)]
    assert [int(pieces) for _, pieces in answers] == [pieces for _, pieces in expected]
    assert [float(score) for score, _ in answers] == pytest.approx([s for s, _ in expected],
                                                                   abs=1e-4)
    assert "stdin line 2: it has 0 tabs" in one_line_error(malformed)
    (first,) = [line.split("\t") for line in output_lines(malformed.stdout)]
    assert int(first[1]) == expected[0][1]
    assert float(first[0]) == pytest.approx(expected[0][0], abs=1e-4)


def test_the_ctranslate2_conversion_translates_as_the_greedy_decoder_cli(ende):
    """`python -m t2t_repro.exporter --export_format=ctranslate2` on the same run, given only
    the run's folder: CTranslate2, fed by the sentencepiece model written beside it, writes
    the greedy decoder CLI's sentences."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    import sentencepiece

    ct2_dir = ende["run"] / "ctranslate2" / "100"
    converted = run_module("t2t_repro.exporter", "--export_format=ctranslate2",
                           f"--output_dir={ende['run']}")
    assert converted.returncode == 0, converted.stderr
    assert (f"Using {' '.join(ende['flags'])} from {ende['run'] / 'flags.txt'}."
            in converted.stderr)
    pieces = sentencepiece.SentencePieceProcessor(model_file=str(ct2_dir / "sentencepiece.model"))
    translator = ctranslate2.Translator(str(ct2_dir), device="cpu")
    outputs = []
    for line in ende["lines"]:
        tokens = pieces.encode(line, out_type=str) + ["</s>"]
        result = translator.translate_batch([tokens], beam_size=1,
                                            max_decoding_length=len(tokens) + 5)
        outputs.append(pieces.decode(result[0].hypotheses[0]))
    greedy = decoder_lines(ende["flags"], ende["run"], ende["source_file"],
                           "--decode_hparams=beam_size=1,extra_length=5")
    assert outputs == greedy[:SENTENCES]


def test_an_export_dir_holding_the_other_formats_versions_is_refused(ende, tmp_path):
    """A CTranslate2 model written among SavedModel versions would become the newest version,
    which the server of that folder cannot load (and the other way round): refused, naming the
    version found and the folder to use, before anything is written."""
    saved_models = ende["version_dir"].parent
    ct2_models = tmp_path / "ct2_versions"
    (ct2_models / "7").mkdir(parents=True)
    (ct2_models / "7" / "model.bin").write_bytes(b"ct2")
    before = {folder: sorted(p.name for p in folder.iterdir())
              for folder in (saved_models, ct2_models)}
    cases = [("ctranslate2", saved_models, f"holds saved_model versions ({saved_models}/100/"
              f"saved_model.pb); a ctranslate2 version beside them", "ctranslate2"),
             ("saved_model", ct2_models, f"holds ctranslate2 versions ({ct2_models}/7/model.bin);"
              f" a saved_model version beside them", "export")]
    for export_format, folder, found, default_subdir in cases:
        result = run_module("t2t_repro.exporter", *ende["flags"], f"--output_dir={ende['run']}",
                            f"--export_format={export_format}", f"--export_dir={folder}",
                            "--version=101")
        assert result.returncode == 1, result.stderr
        assert one_line_error(result) == (
            f"error: --export_dir={folder} {found} would leave a server of that folder a newest "
            f"version it cannot read. Name another --export_dir (by default, --export_format="
            f"{export_format} writes to <output_dir>/{default_subdir}).")
    assert before == {folder: sorted(p.name for p in folder.iterdir())
                      for folder in (saved_models, ct2_models)}


def test_the_export_ctranslate2_command_writes_the_folder_it_is_given(ende, tmp_path):
    target = tmp_path / "ct2"
    converted = run_module("t2t_repro.export_ctranslate2", f"--output_dir={ende['run']}",
                           f"--ct2_dir={target}", "--quantization=int8")
    assert converted.returncode == 0, converted.stderr
    assert (target / "model.bin").is_file() and (target / "sentencepiece.model").is_file()
    assert json.loads((target / "t2t_repro_info.json").read_text())["problem"] == "translate_ende"
    written = (target / "model.bin").read_bytes()
    # --ct2_dir is the exact folder: a second conversion into it, or a version or export_dir
    # beside it, is refused with advice that applies, before the model is read.
    for extra, message in (
            ([], f"{target} already exists, and an export is never written over: give another "
                 f"--ct2_dir, or remove that folder yourself."),
            (["--version=5"], "--ct2_dir names the exact folder to write; --version names one "
                              "under --export_dir instead: give one or the other."),
            ([f"--export_dir={tmp_path}", "--version=5"],
             "--ct2_dir names the exact folder to write; --export_dir and --version name one "
             "under --export_dir instead: give one or the other.")):
        again = run_module("t2t_repro.export_ctranslate2", f"--output_dir={ende['run']}",
                           f"--ct2_dir={target}", *extra)
        assert again.returncode == 1 and again.stderr.splitlines() == [f"error: {message}"]
    assert (target / "model.bin").read_bytes() == written
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ct2"]


def test_the_ctranslate2_conversion_aligns_as_the_decoder_cli(ende, tmp_path):
    """Converted with the decode hparams' alignment layer and heads, CTranslate2's attention
    (its argmax over the source pieces, </s> left out) gives the decoder CLI's alignments."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    import sentencepiece

    setting = "alignment_layer=0,alignment_heads=2"
    target = tmp_path / "ct2"
    converted = run_module("t2t_repro.export_ctranslate2", f"--output_dir={ende['run']}",
                           f"--ct2_dir={target}", f"--decode_hparams={setting}")
    assert converted.returncode == 0, converted.stderr
    assert "alignment_layer=0, alignment_heads=2" in converted.stderr
    pieces = sentencepiece.SentencePieceProcessor(model_file=str(target / "sentencepiece.model"))
    translator = ctranslate2.Translator(str(target), device="cpu")
    theirs = []
    for line in ende["lines"]:
        tokens = pieces.encode(line, out_type=str) + ["</s>"]
        result = translator.translate_batch([tokens], beam_size=1, return_attention=True,
                                            max_decoding_length=len(tokens) + 5)[0]
        attention = np.array(result.attention[0])[:, :-1]
        alignment = " ".join(f"{i}-{j}" for i, j in sorted(
            (int(i), j) for j, i in enumerate(attention.argmax(axis=1))))
        theirs.append(f"{pieces.decode(result.hypotheses[0])}\t{alignment}")
    ours = decoder_lines(ende["flags"], ende["run"], ende["source_file"],
                         f"--decode_hparams=beam_size=1,extra_length=5,return_alignments=true,"
                         f"{setting}")
    assert ours[:SENTENCES] == theirs


@pytest.mark.parametrize("flag, other_format", [
    ("--quantization=int8", "--export_format=saved_model"),
    ("--max_input_tokens=10", "--export_format=ctranslate2"),
    ("--decode_precision=bfloat16", "--export_format=ctranslate2"),
])
def test_a_flag_of_the_other_format_is_an_error(ende, tmp_path, flag, other_format):
    refused = run_module("t2t_repro.exporter", f"--output_dir={ende['run']}", other_format, flag,
                         f"--export_dir={tmp_path / 'export'}")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"{flag.split('=')[0]} applies to --export_format=" in refused.stderr
    assert not (tmp_path / "export").exists()


@pytest.mark.parametrize("export_format, overrides, message", [
    ("ctranslate2", "beam_size=8,alpha=1.0",
     "--export_format=ctranslate2 does not read decode hparam beam_size=8, alpha=1.0: it reads "
     "alignment_layer and alignment_heads; CTranslate2 is given a search's settings when it "
     "translates."),
    ("saved_model", "alignment_layer=0,return_alignments=true,batch_size=8",
     "--export_format=saved_model does not read decode hparam batch_size=8, alignment_layer=0: "
     "it reads beam_size, alpha and extra_length."),
])
def test_a_decode_hparam_the_format_does_not_read_is_an_error(ende, tmp_path, export_format,
                                                              overrides, message):
    """Not ignored: a user setting beam_size=8 for CTranslate2 would get nothing of it."""
    refused = run_module("t2t_repro.exporter", f"--output_dir={ende['run']}",
                         f"--export_format={export_format}", f"--decode_hparams={overrides}",
                         f"--export_dir={tmp_path / 'export'}")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == f"error: {message}"
    assert not (tmp_path / "export").exists()


@pytest.mark.parametrize("overrides, named", [
    ("return_alignments=true", "decode hparam return_alignments applies to t2t_repro.decoder"),
    ("beam_size=1,sampling_method=random", "sampling_method=random is the decoder's only"),
])
def test_the_module_refuses_decode_hparams_an_export_cannot_answer_with(overrides, named):
    """From Python too, before the model is read (there is none here)."""
    from t2t_repro import registry
    from t2t_repro.decoding.text_decoding import create_decode_hparams
    from t2t_repro.serving.export import ExportError, TextToTextModule

    problem = registry.problems["algorithmic_copy"]()
    with pytest.raises(ExportError) as error:
        TextToTextModule(None, problem, create_decode_hparams(problem, overrides))
    assert named in str(error.value)


def test_a_saved_model_with_alignments_is_an_error(ende, tmp_path):
    refused = run_module("t2t_repro.exporter", f"--output_dir={ende['run']}",
                         "--decode_hparams=return_alignments=true",
                         f"--export_dir={tmp_path / 'export'}")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    last_line = refused.stderr.strip().splitlines()[-1]
    assert last_line.startswith("error: decode hparam return_alignments applies to t2t_repro.")
    assert not (tmp_path / "export").exists()


def test_flags_that_disagree_with_the_run_are_an_error_naming_both(ende, tmp_path):
    refused = run_module("t2t_repro.exporter", f"--output_dir={ende['run']}",
                         "--problem=translate_enfr", f"--export_dir={tmp_path / 'export'}")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert ("--problem=translate_enfr disagrees with --problem=translate_ende that "
            f"{ende['run'] / 'flags.txt'} records" in refused.stderr)
    assert not (tmp_path / "export").exists()


def test_a_sampling_export_is_refused(ende, tmp_path):
    refused = run_module("t2t_repro.exporter", f"--output_dir={ende['run']}",
                         f"--export_dir={tmp_path / 'export'}",
                         "--decode_hparams=beam_size=1,sampling_method=random", "--version=9")
    assert refused.returncode == 1
    assert ("error: an export runs beam or greedy search; sampling_method=random is the "
            "decoder's only (python -m t2t_repro.decoder)." in refused.stderr.splitlines())
    assert not (tmp_path / "export").exists()


def test_the_export_holds_each_weight_once(ende):
    """The model's variables (its weights and dropout seeds) and nothing else: no second
    copy, no optimizer slots."""
    import tensorflow as tf

    from t2t_repro.bench.search import load_run

    _, model = load_run(ende["run"])
    saved = tf.train.list_variables(str(ende["version_dir"] / "variables" / "variables"))
    assert [name for name, _ in saved if not name.startswith("model_variables/")] == [
        "_CHECKPOINTABLE_OBJECT_GRAPH"]
    assert (sorted(tuple(shape) for name, shape in saved if name.startswith("model_variables/"))
            == sorted(tuple(variable.shape) for variable in model.variables))


def test_the_export_holds_no_gradient_functions(ende):
    """Nothing differentiates an export: the functions it holds are its signatures' and their
    parts, none of the gradient functions TensorFlow traces for ops with custom gradients
    (saved, they made up 48 of the 67 functions of such an export)."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((ende["version_dir"] / "saved_model.pb").read_bytes())
    names = [function.signature.name
             for function in saved.meta_graphs[0].graph_def.library.function]
    assert any("_beams" in name for name in names)
    assert [name for name in names if "grad" in name] == []


def test_the_export_transposes_no_integers(ende):
    """On some CPUs TensorFlow's oneDNN rewrite logs an error line for an integer Transpose
    (`layers/row_gathers.py`), at a served export's first request: none in any of its
    functions, the tokenized inputs' EOS included (`export.with_eos`)."""
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((ende["version_dir"] / "saved_model.pb").read_bytes())
    graph = saved.meta_graphs[0].graph_def
    nodes = [*graph.node, *(node for function in graph.library.function
                            for node in function.node_def)]
    transposed = {tf.dtypes.as_dtype(node.attr["T"].type) for node in nodes
                  if node.op == "Transpose"}
    assert transposed and not any(dtype.is_integer for dtype in transposed)


def test_the_export_uses_the_four_sentencepiece_ops_of_tensorflow_text(ende):
    """docs/serving.md names the TensorFlow Text ops a model server must have: these, all in
    TensorFlow Text's sentencepiece op library, which TF Serving links."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((ende["version_dir"] / "saved_model.pb").read_bytes())
    graph = saved.meta_graphs[0].graph_def
    ops = {node.op for node in [*graph.node, *(node for function in graph.library.function
                                               for node in function.node_def)]}
    assert {op for op in ops if op.startswith("Sentencepiece")} == {
        "SentencepieceOp", "SentencepieceTokenizeOp", "SentencepieceDetokenizeOp",
        "SentencepieceIdToStringOp"}


def test_each_tokenized_input_gets_its_eos_and_padding():
    import tensorflow as tf

    from t2t_repro.names import EOS_ID as E, PAD_ID as P
    from t2t_repro.serving.export import with_eos

    ids, lengths = with_eos(tf.ragged.constant([[5, 6], [], [7]], dtype=tf.int32))
    assert ids.dtype == tf.int32
    assert ids.numpy().tolist() == [[5, 6, E], [E, P, P], [7, E, P]]
    assert lengths.numpy().tolist() == [3, 1, 2]


def test_the_export_loads_without_notices_that_read_like_failures(ende, capfd, caplog):
    """Neither sentencepiece's INFO line about a model without normalisation nor TensorFlow's
    warning, for each function, that it was saved without its custom gradients (on purpose:
    `test_the_export_holds_no_gradient_functions`); the served model is the export's."""
    import logging

    from t2t_repro.serving.model_store import load_latest

    capfd.readouterr()
    with caplog.at_level(logging.INFO, logger="absl"), caplog.at_level(logging.INFO,
                                                                       logger="tensorflow"):
        model = load_latest(str(ende["version_dir"].parent), "ende")
    assert capfd.readouterr().err == ""
    assert [record.getMessage() for record in caplog.records] == []
    assert (model.name, model.version) == ("ende", 100)


def variable_bytes(version_dir):
    return sum(path.stat().st_size for path in (version_dir / "variables").iterdir())


def test_a_bfloat16_export_holds_bfloat16_weights_and_answers_as_the_decoder(ende, ende_answers,
                                                                            export_runner,
                                                                            tmp_path):
    """--decode_precision=bfloat16: every beam and score equal the decoder's with that flag
    (its scores are not float32's), from weights stored in half the bytes."""
    exported = run_module("t2t_repro.exporter", *ende["flags"], f"--output_dir={ende['run']}",
                          f"--export_dir={tmp_path / 'export'}", DECODE_HPARAMS,
                          "--decode_precision=bfloat16")
    assert exported.returncode == 0, exported.stderr
    version_dir = tmp_path / "export" / "100"
    info = json.loads((version_dir / "assets.extra" / "export_info.json").read_text())
    assert info["decode_precision"] == "bfloat16"
    assert variable_bytes(version_dir) < 0.55 * variable_bytes(ende["version_dir"])
    beams = export_runner(version_dir, {"inputs": ende["lines"]})["signatures"]["beams"]
    expected = [line.split("\t") for line in decoder_lines(
        ende["flags"], ende["run"], ende["source_file"], "--decode_hparams=beam_size=2,"
        "alpha=0.6,extra_length=5,return_beams=true", "--decode_precision=bfloat16")]
    assert [row[0::2] for row in expected[:SENTENCES]] == beams["outputs"]
    for row, scores in zip(expected, beams["scores"]):
        assert [float(score) for score in row[1::2]] == pytest.approx(scores, abs=1e-4)
    assert ende_answers["signatures"]["beams"]["scores"][:SENTENCES] != beams["scores"]


def test_an_int8_saved_model_is_refused_naming_ctranslate2s(ende, tmp_path):
    refused = run_module("t2t_repro.exporter", f"--output_dir={ende['run']}",
                         f"--export_dir={tmp_path / 'export'}", "--decode_precision=int8")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "--export_format=ctranslate2 --quantization=int8" in refused.stderr
    assert not (tmp_path / "export").exists()


def test_a_negative_version_is_refused_as_the_flags_are_read(tmp_path):
    """No folder `-1`, which no server would take for a version."""
    refused = run_module("t2t_repro.exporter", f"--output_dir={tmp_path}",
                         f"--export_dir={tmp_path / 'export'}", "--version=-1")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "flag --version=-1: -1 is not" in refused.stderr
    assert not (tmp_path / "export").exists()
