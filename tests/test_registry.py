"""The registry: decorator registration, naming, errors, and what the project registers."""

import pytest

from t2t_repro import registry
from t2t_repro.hparams import HParams
from t2t_repro.registry import Registry, RegistryError, default_name


class TranslateEnde:
    pass


class HTTPServer:
    pass


def transformer_base():
    pass


@pytest.mark.parametrize(
    "obj, name",
    [(TranslateEnde, "translate_ende"), (HTTPServer, "http_server"),
     (transformer_base, "transformer_base")],
)
def test_default_name_is_snake_case(obj, name):
    assert default_name(obj) == name


def test_decorator_registers_under_snake_case_name_and_returns_object():
    things = Registry("thing")

    @things.register
    class AlgorithmicCopy:
        pass

    @things.register()
    def my_hparams():
        return 1

    assert things["algorithmic_copy"] is AlgorithmicCopy
    assert things["my_hparams"] is my_hparams and my_hparams() == 1
    assert things.names() == ["algorithmic_copy", "my_hparams"]
    assert "algorithmic_copy" in things and "AlgorithmicCopy" not in things


def test_decorator_with_explicit_name():
    things = Registry("thing")

    @things.register("transformer")
    class Transformer:
        pass

    assert things["transformer"] is Transformer
    assert "transformer" in things and things.names() == ["transformer"]


def test_duplicate_registration_is_an_error():
    things = Registry("thing")
    things.register("a")(object)
    with pytest.raises(RegistryError, match="thing 'a' is already registered"):
        things.register("a")(int)
    assert things["a"] is object

    @things.register
    def b():
        pass

    with pytest.raises(RegistryError, match="'b'"):

        @things.register  # same default name from another function
        def b():  # noqa: F811
            pass


def test_unknown_name_lists_registered_names_closest_first():
    things = Registry("thing")
    for name in ("banana", "apple", "apricot", "cherry"):
        things.register(name)(object)
    with pytest.raises(RegistryError) as error:
        things["appel"]
    message = str(error.value)
    assert isinstance(error.value, KeyError)
    assert message.startswith("Unknown thing 'appel'.")  # not quoted as KeyError would
    listed = message.split("(closest first): ")[1].split(". ")[0].split(", ")
    assert listed[0] == "apple"
    assert sorted(listed) == things.names()
    assert "--registry_help" in message


def test_unknown_name_in_empty_registry():
    with pytest.raises(RegistryError, match=r"Unknown thing 'x'.*\(none\)"):
        Registry("thing")["x"]


TABLE3_SETS = [
    f"transformer_table3_{row}"
    for row in (
        "a_h1", "a_h4", "a_h16", "a_h32", "b_dk16", "b_dk32", "c_n2", "c_n4", "c_n8", "c_d256",
        "c_d1024", "c_ff1024", "c_ff4096", "d_drop0", "d_drop02", "d_ls0", "d_ls02",
        "e_learned_pos",
    )
]
HPARAMS_SETS = [
    "transformer_base", "transformer_big", "transformer_big_enfr", "transformer_parsing",
    "transformer_parsing_from_big", "transformer_base_prenorm", "transformer_tiny",
    "transformer_small", *TABLE3_SETS,
]


@pytest.fixture(scope="module")
def project_registry():
    registry.import_all()
    registry.import_all()  # idempotent: no duplicate-registration error
    return registry


def test_project_registers_problems_hparams_sets_and_model(project_registry):
    for name in ("algorithmic_copy", "algorithmic_reverse"):
        assert name in project_registry.problems
    for name in HPARAMS_SETS:
        assert name in project_registry.hparams_sets
        assert isinstance(project_registry.hparams_sets[name](), HParams)
    from t2t_repro.models.transformer import Transformer

    assert project_registry.models["transformer"] is Transformer


def test_table3_sets_are_distinct(project_registry):
    sets = [project_registry.hparams_sets[name]() for name in TABLE3_SETS]
    assert all(a != b for i, a in enumerate(sets) for b in sets[i + 1:])


def test_help_text_lists_everything(project_registry):
    text = project_registry.help_text()
    lines = {line.strip() for line in text.splitlines()}
    for name in ("algorithmic_copy", "algorithmic_reverse", "transformer", *HPARAMS_SETS):
        assert name in lines
    assert f"problems ({len(project_registry.problems.names())}):" in text
    assert f"hparams sets ({len(project_registry.hparams_sets.names())}):" in text
    assert f"models ({len(project_registry.models.names())}):" in text


def test_project_lookup_of_misspelt_set_suggests_the_right_one(project_registry):
    with pytest.raises(RegistryError) as error:
        project_registry.hparams_sets["transformer_bigg"]
    assert str(error.value).split("(closest first): ")[1].startswith("transformer_big,")
