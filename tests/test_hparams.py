"""HParams: typed values, strict overrides, JSON round trip, and the registered sets' values."""

import json

import pytest

from t2t_repro import hparams as hparams_lib
from t2t_repro.hparams import HParams, HParamsError, create_hparams
from t2t_repro.registry import RegistryError


def typed():
    return HParams(steps=10, rate=0.5, shuffle=False, name="base")


# Overrides.


def test_overrides_parse_each_type():
    hp = typed().override_from_string("steps=20,rate=2,shuffle=true,name=big model")
    assert hp.values() == {"steps": 20, "rate": 2.0, "shuffle": True, "name": "big model"}
    assert type(hp.steps) is int and type(hp.rate) is float and type(hp.shuffle) is bool


@pytest.mark.parametrize(
    "text, expected",
    [("true", True), ("True", True), ("TRUE", True), ("1", True), ("false", False),
     ("False", False), ("0", False)],
)
def test_bool_override_accepts_true_and_false(text, expected):
    hp = HParams(flag=not expected).override_from_string(f"flag={text}")
    assert hp.flag is expected


@pytest.mark.parametrize("text, expected", [("3", 3.0), ("1e-9", 1e-9), ("-0.25", -0.25)])
def test_float_override_accepts_int_and_exponent_text(text, expected):
    hp = HParams(rate=0.5).override_from_string(f"rate={text}")
    assert hp.rate == expected and type(hp.rate) is float


def test_override_ignores_spaces_and_empty_items():
    hp = typed().override_from_string(" steps = 7 , ,rate=0.1,")
    assert (hp.steps, hp.rate) == (7, 0.1)
    assert typed().override_from_string("") == typed()


@pytest.mark.parametrize(
    "overrides, key",
    [
        ("stpes=3", "stpes"),  # unknown name
        ("steps=1,steps=2", "steps"),  # given twice
        ("a", "a"),  # no '='
        ("=1", "=1"),  # no name
        ("steps=1.5", "steps"),  # float for int
        ("steps=ten", "steps"),
        ("rate=fast", "rate"),
        ("shuffle=yes", "shuffle"),
    ],
)
def test_bad_overrides_are_errors_naming_the_key(overrides, key):
    with pytest.raises(HParamsError, match=f"'{key}'"):
        typed().override_from_string(overrides)


@pytest.mark.parametrize("text", ["inf", "-inf", "Infinity", "nan"])
def test_a_number_that_is_not_finite_is_an_error_naming_the_key(text):
    """No hparam means anything at infinity (a length penalty of inf drowns every score)."""
    with pytest.raises(HParamsError, match=f"^hparam 'rate' expects a finite number, got "
                                           f"'{text}'.$"):
        typed().override_from_string(f"rate={text}")


def test_failed_override_string_changes_nothing():
    hp = typed()
    with pytest.raises(HParamsError):
        hp.override_from_string("steps=99,rate=fast")
    assert hp == typed()


def test_unknown_name_lists_valid_names_closest_first_and_says_how_to_fix():
    hp = HParams(hidden_size=512, filter_size=2048, num_heads=8, batch_size=4096)
    with pytest.raises(HParamsError) as error:
        hp.override_from_string("hiden_size=256")
    message = str(error.value)
    assert "Unknown hparam 'hiden_size'" in message
    listed = message.split("(closest first): ")[1].split(". ")[0].split(", ")
    assert listed[0] == "hidden_size"
    assert sorted(listed) == sorted(hp.values())
    assert "add_hparam" in message  # the way to define a new one


def test_errors_name_the_kind_of_hparams_and_only_a_models_suggest_add_hparam():
    messages = []
    for overrides in ("stpes=3", "steps=ten", "steps=1,steps=2", "a"):
        with pytest.raises(HParamsError) as error:
            typed().override_from_string(overrides, "data hparam")
        messages.append(str(error.value))
    # difflib's ratios to "stpes": steps 0.8, rate 4/9, shuffle 4/12, name 2/9.
    assert messages == [
        "Unknown data hparam 'stpes'. Valid data hparams (closest first): steps, rate, "
        "shuffle, name.",
        "data hparam 'steps' expects int, got 'ten'.",
        "data hparam 'steps' is given twice in 'steps=1,steps=2'.",
        "data hparam override 'a' is not of the form name=value."]
    with pytest.raises(HParamsError, match="^Unknown decode hparam 'x': there are no decode "
                                           "hparams to set here; leave it out.$"):
        HParams().override_from_string("x=1", "decode hparam")


def test_unknown_name_on_empty_hparams_is_an_hparams_error():
    with pytest.raises(HParamsError, match="^Unknown hparam 'anything': there are no hparams to "
                                           "set here. Fix the name, or define"):
        HParams().override_from_string("anything=1")


# Setting and adding.


def test_set_hparam_checks_type_and_widens_int_to_float():
    hp = typed()
    hp.rate = 1
    assert hp.rate == 1.0 and type(hp.rate) is float
    hp.set_hparam("steps", 11)
    assert hp.steps == 11
    for key, value in [("steps", True), ("steps", 1.5), ("shuffle", 1), ("name", 3)]:
        with pytest.raises(HParamsError, match=f"'{key}'"):
            hp.set_hparam(key, value)
    with pytest.raises(HParamsError, match="'missing'"):
        hp.missing = 1
    with pytest.raises(AttributeError, match="'missing'"):
        hp.missing  # noqa: B018


def test_add_hparam_rejects_duplicates_and_unsupported_types():
    hp = typed()
    with pytest.raises(HParamsError, match="'steps'"):
        hp.add_hparam("steps", 3)
    with pytest.raises(HParamsError, match="'sizes'"):
        hp.add_hparam("sizes", [1, 2])
    hp.add_hparam("extra", 1.5)
    assert "extra" in hp


# JSON.


def test_json_round_trip_through_output_dir(tmp_path):
    hp = HParams(steps=10, rate=1.0, epsilon=1e-9, shuffle=True, name="x,y=z")
    path = hparams_lib.save(hp, str(tmp_path / "run"))
    assert path.endswith(hparams_lib.HPARAMS_FILENAME)
    loaded = hparams_lib.load(str(tmp_path / "run"))
    assert loaded == hp
    assert {k: type(v) for k, v in loaded.values().items()} == {
        k: type(v) for k, v in hp.values().items()
    }


def test_load_without_saved_hparams_is_none(tmp_path):
    assert hparams_lib.load(str(tmp_path)) is None


def test_json_round_trip_of_registered_set(tmp_path):
    hp = create_hparams("transformer_big", "train_steps=5")
    hparams_lib.save(hp, str(tmp_path))
    assert hparams_lib.load(str(tmp_path)) == hp


@pytest.mark.parametrize("name, edited, held", [
    ("num_heads", "4", "'4' of type str; transformer_base's is of type int"),
    ("hidden_size", 64.0, "64.0 of type float; transformer_base's is of type int"),
    ("packed", "yes", "'yes' of type str; transformer_base's is of type bool"),
    ("label_smoothing", True, "True of type bool; transformer_base's is of type float"),
])
def test_a_saved_hparam_of_another_type_than_its_sets_is_an_error_naming_it(
        tmp_path, name, edited, held):
    values = create_hparams("transformer_tiny").values()
    (tmp_path / "hparams.json").write_text(json.dumps({**values, name: edited}))
    with pytest.raises(HParamsError) as raised:
        hparams_lib.load(str(tmp_path))
    assert str(raised.value) == (
        f"{tmp_path / 'hparams.json'} is not a readable hparams file (hparam '{name}' holds "
        f"{held}). Restore it from a copy, or delete it and pass the run's --hparams_set and "
        f"--hparams again (checkpoints are kept).")


def test_a_saved_whole_number_for_a_float_hparam_loads_as_a_float(tmp_path):
    values = create_hparams("transformer_tiny").values()
    (tmp_path / "hparams.json").write_text(json.dumps({**values, "label_smoothing": 0,
                                                       "my_own_hparam": "kept"}))
    loaded = hparams_lib.load(str(tmp_path))
    assert type(loaded.label_smoothing) is float and loaded.label_smoothing == 0.0
    assert loaded.my_own_hparam == "kept"


# create_hparams and the registered sets.


def test_a_saved_hparams_file_that_is_not_utf8_is_an_hparams_error_naming_it(tmp_path):
    (tmp_path / "hparams.json").write_bytes(b'{"num_heads": "\xff"}')
    with pytest.raises(HParamsError, match=r"hparams\.json is not a readable hparams file "
                                           r"\(.*can't decode byte 0xff"):
        hparams_lib.load(str(tmp_path))


def test_create_hparams_applies_overrides_to_registered_set():
    overrides = "hidden_size=256,label_smoothing=0,normalize_first=true"
    hp = create_hparams("transformer_base", overrides)
    assert (hp.hidden_size, hp.label_smoothing, hp.normalize_first) == (256, 0.0, True)
    assert hp.differences(create_hparams("transformer_base")) == [
        "hidden_size",
        "label_smoothing",
        "normalize_first",
    ]


def test_create_hparams_errors():
    with pytest.raises(RegistryError, match="transformer_base"):
        create_hparams("transformer_bse")
    with pytest.raises(HParamsError, match="'num_layers'"):
        create_hparams("transformer_base", "num_layers=3")
    with pytest.raises(HParamsError, match=r"^overrides=\{'hidden_size': 8\}: give them as "
                                           r"a string, 'name=value,name2=value2', as --hparams"):
        create_hparams("transformer_base", {"hidden_size": 8})


def test_transformer_base_has_the_papers_values():
    hp = create_hparams("transformer_base")
    expected = {
        # §3: N=6, d_model=512, d_ff=2048, h=8 (d_k=d_v=64), post-norm, shared embeddings.
        "num_hidden_layers": 6,
        "hidden_size": 512,
        "filter_size": 2048,
        "num_heads": 8,
        "normalize_first": False,
        "position_encoding": "sinusoidal",
        "shared_source_target_embedding": True,
        "shared_embedding_and_softmax_weights": True,
        # §5.3: Adam β1=0.9, β2=0.98, ε=1e-9, warmup 4000 steps.
        "optimizer_adam_beta1": 0.9,
        "optimizer_adam_beta2": 0.98,
        "optimizer_adam_epsilon": 1e-9,
        "learning_rate_warmup_steps": 4000,
        # §5.4: P_drop=0.1, ε_ls=0.1; 100K steps (§5.2).
        "layer_prepostprocess_dropout": 0.1,
        "label_smoothing": 0.1,
        "train_steps": 100000,
    }
    assert {key: hp.values()[key] for key in expected} == expected
    assert hp.num_encoder_layers in (0, 6) and hp.num_decoder_layers in (0, 6)
    assert (hp.attention_key_channels or 512) // hp.num_heads == 64
    assert (hp.attention_value_channels or 512) // hp.num_heads == 64


def changed_fields(hparams_set, parent="transformer_base"):
    child, base = create_hparams(hparams_set), create_hparams(parent)
    return {key: child.values()[key] for key in child.differences(base)}


def test_transformer_big_differs_from_base_in_exactly_the_papers_fields():
    assert changed_fields("transformer_big") == {
        "hidden_size": 1024,
        "filter_size": 4096,
        "num_heads": 16,
        "layer_prepostprocess_dropout": 0.3,
        "train_steps": 300000,
    }


def test_derived_variants():
    assert changed_fields("transformer_big_enfr", "transformer_big") == {
        "layer_prepostprocess_dropout": 0.1
    }
    assert changed_fields("transformer_base_prenorm") == {"normalize_first": True}
    # §6.3: d_model 1024 and 4 layers, "all other parameters ... unchanged" from base.
    parsing = changed_fields("transformer_parsing")
    assert parsing == {"hidden_size": 1024, "num_hidden_layers": 4}
    parsing_from_big = changed_fields("transformer_parsing_from_big", "transformer_big")
    assert parsing_from_big == {"num_hidden_layers": 4, "layer_prepostprocess_dropout": 0.1}


# Each Table 3 row, written from the paper (h·d_k and h·d_v are attention_*_channels).
TABLE3_CHANGES = {
    "transformer_table3_a_h1": {"num_heads": 1},  # d_k = d_v = 512
    "transformer_table3_a_h4": {"num_heads": 4},
    "transformer_table3_a_h16": {"num_heads": 16},
    "transformer_table3_a_h32": {"num_heads": 32},  # d_k = d_v = 16
    "transformer_table3_b_dk16": {"attention_key_channels": 8 * 16},
    "transformer_table3_b_dk32": {"attention_key_channels": 8 * 32},
    "transformer_table3_c_n2": {"num_hidden_layers": 2},
    "transformer_table3_c_n4": {"num_hidden_layers": 4},
    "transformer_table3_c_n8": {"num_hidden_layers": 8},
    "transformer_table3_c_d256": {"hidden_size": 256},
    "transformer_table3_c_d1024": {"hidden_size": 1024},
    "transformer_table3_c_ff1024": {"filter_size": 1024},
    "transformer_table3_c_ff4096": {"filter_size": 4096},
    "transformer_table3_d_drop0": {"layer_prepostprocess_dropout": 0.0},
    "transformer_table3_d_drop02": {"layer_prepostprocess_dropout": 0.2},
    "transformer_table3_d_ls0": {"label_smoothing": 0.0},
    "transformer_table3_d_ls02": {"label_smoothing": 0.2},
    "transformer_table3_e_learned_pos": {"position_encoding": "learned"},
}


@pytest.mark.parametrize("hparams_set, changes", sorted(TABLE3_CHANGES.items()))
def test_table3_row_differs_from_base_only_in_its_fields(hparams_set, changes):
    assert changed_fields(hparams_set) == changes


def test_table3_rows_keep_the_papers_per_head_sizes():
    """Row A keeps h·d_k = 512; row C's d_model 256 / 1024 gives d_k = d_v = 32 / 128."""
    for name, d_k in [("a_h1", 512), ("a_h4", 128), ("a_h16", 32), ("a_h32", 16),
                      ("c_d256", 32), ("c_d1024", 128)]:
        hp = create_hparams(f"transformer_table3_{name}")
        assert (hp.attention_key_channels or hp.hidden_size) // hp.num_heads == d_k, name


def test_differences_text_writes_both_values_as_overrides_do():
    """Booleans as true/false, strings bare, and an hparam one side lacks as "not set"; in the
    order `HParams.differences` gives (sorted by name)."""
    ours = HParams(hidden_size=64, fused_attention=True, ffn_activation="relu", depth=2)
    theirs = HParams(hidden_size=32, fused_attention=False, ffn_activation="gelu", depth=2,
                     extra=1)
    assert hparams_lib.differences_text(ours, theirs, "the run's") == (
        "extra=not set (the run's 1), ffn_activation=relu (the run's gelu), "
        "fused_attention=true (the run's false), hidden_size=64 (the run's 32)")
    assert hparams_lib.differences_text(ours, theirs, "source", ["hidden_size"]) == (
        "hidden_size=64 (source 32)")
