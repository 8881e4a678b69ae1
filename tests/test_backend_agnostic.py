"""The model, its training math and the JAX training path stay importable without TensorFlow
(DESIGN §6).

The GPU machine runs the model with KERAS_BACKEND=jax and has no TensorFlow, so these modules
may import TensorFlow only inside a function that runs under the TensorFlow backend. Checked on
the source, for every module at once: no module-level import of a TensorFlow package, and
module-level imports of the project stay inside the same set of modules. The JAX trainer is
also run with TensorFlow unimportable (tests/training/test_jax_training.py).
"""

import ast
import pathlib

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
BACKEND_AGNOSTIC = {
    "t2t_repro",
    "t2t_repro.training",
    "t2t_repro.registry",
    "t2t_repro.names",
    "t2t_repro.decoding",
    "t2t_repro.decoding.beam_search",
    "t2t_repro.decoding.alignments",
    "t2t_repro.decoding.compiled",
    "t2t_repro.decoding.ensemble",
    "t2t_repro.decoding.logit_reductions",
    "t2t_repro.decoding.sampling",
    "t2t_repro.decoding.scoring",
    "t2t_repro.decoding.text_decoding",
    "t2t_repro.decoding.transformer_search",
    "t2t_repro.hparams",
    "t2t_repro.utils.atomic_files",
    "t2t_repro.errors",
    "t2t_repro.layers",
    "t2t_repro.layers.attention",
    "t2t_repro.layers.cache_reads",
    "t2t_repro.layers.cache_writes",
    "t2t_repro.layers.dense_layout",
    "t2t_repro.layers.embedding",
    "t2t_repro.layers.feed_forward",
    "t2t_repro.layers.head_transpose",
    "t2t_repro.layers.masks",
    "t2t_repro.layers.positional",
    "t2t_repro.layers.row_gathers",
    "t2t_repro.layers.tensorflow_graph",
    "t2t_repro.layers.transformer_layers",
    "t2t_repro.models",
    "t2t_repro.models.transformer",
    "t2t_repro.models.flops",
    "t2t_repro.training.peak_flops",
    "t2t_repro.training.learning_rate",
    "t2t_repro.training.losses",
    "t2t_repro.training.chunked_loss",
    "t2t_repro.training.optimizer",
    "t2t_repro.training.attention_images",
    "t2t_repro.visualization",
    "t2t_repro.visualization.attention",
    "t2t_repro.visualization.figures",
    "t2t_repro.visualization.plots",
    "t2t_repro.utils.plotting",
    "t2t_repro.utils.backend",
    "t2t_repro.utils.cpu",
    "t2t_repro.data",
    "t2t_repro.data.array_batches",
    "t2t_repro.data.packed_batches",
    "t2t_repro.data.packing",
    "t2t_repro.data.pair_packing",
    "t2t_repro.data.problem",
    "t2t_repro.data.token_arrays",
    "t2t_repro.training.attention_images",
    "t2t_repro.training.best_checkpoint",
    "t2t_repro.training.checkpoints",
    "t2t_repro.training.jax.compiler_options",
    "t2t_repro.training.jax.run",
    "t2t_repro.training.jax.train_step",
    "t2t_repro.training.local_evaluation",
    "t2t_repro.training.run",
    "t2t_repro.training.run_factory",
    "t2t_repro.training.run_records",
    "t2t_repro.training.strategy_names",
    "t2t_repro.training.summaries",
    "t2t_repro.training.update_stats",
    "t2t_repro.training.warm_start",
    "t2t_repro.visualization",
    "t2t_repro.visualization.attention",
    "problems.algorithmic",
    "hparams",
    "hparams.transformer",
}
TENSORFLOW_PACKAGES = ("tensorflow", "tensorflow_text", "tensorflow_datasets")
PROJECT_PACKAGES = ("t2t_repro", "problems", "hparams")


def module_path(module):
    parts = module.split(".")
    package_init = REPO_ROOT.joinpath(*parts, "__init__.py")
    if package_init.exists():
        return package_init
    return REPO_ROOT.joinpath(*parts[:-1], parts[-1] + ".py")


def module_level_imports(module):
    """Names imported by statements at module level (not inside functions or classes)."""
    tree = ast.parse(module_path(module).read_text())
    names = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def top_package(name):
    return name.split(".")[0]


@pytest.mark.parametrize("module", sorted(BACKEND_AGNOSTIC))
def test_module_imports_no_tensorflow_and_only_agnostic_project_modules(module):
    for name in module_level_imports(module):
        assert top_package(name) not in TENSORFLOW_PACKAGES, f"{module} imports {name}"
        if top_package(name) in PROJECT_PACKAGES:
            # `from pkg import name` may name a module or an attribute of pkg.
            importable = name if module_path(name).exists() else name.rsplit(".", 1)[0]
            assert importable in BACKEND_AGNOSTIC, f"{module} imports {importable}"


def test_the_checker_sees_a_tensorflow_import():
    """The data pipeline does import TensorFlow at module level, and the checker notices."""
    assert "tensorflow" in module_level_imports("t2t_repro.data.batching")
