"""One registry each for problems, hparams sets and models, filled by decorators.

Registration happens when the defining module is imported. Each registry imports its own
package (`problems`, `hparams`, `t2t_repro.models`) before its first lookup, so every name is
known then, and looking up an hparams set or a model never loads the problems' TensorFlow.
"""

import difflib
import importlib
import re

from t2t_repro.errors import UserError


class RegistryError(UserError, KeyError):
    """An unknown or duplicate registry name; the message lists the registered names."""

    def __str__(self):
        return self.args[0]


def default_name(obj):
    """snake_case of a class or function name: `TranslateEnde` -> `translate_ende`."""
    name = obj.__name__
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


class Registry:
    """Names mapped to objects, with error messages that list the registered names."""

    def __init__(self, kind, package=None):
        self.kind = kind
        self.package = package
        self._entries = {}

    def import_package(self):
        """Imports the package whose modules register into this registry (idempotent)."""
        if self.package:
            importlib.import_module(self.package)

    def register(self, name_or_obj=None):
        """Decorator: `@reg.register` (snake_case of the object's name) or
        `@reg.register("name")`."""

        def decorate(obj, name=None):
            name = name or default_name(obj)
            if name in self._entries:
                raise RegistryError(f"{self.kind} '{name}' is already registered.")
            self._entries[name] = obj
            return obj

        if callable(name_or_obj):
            return decorate(name_or_obj)
        return lambda obj: decorate(obj, name_or_obj)

    def __getitem__(self, name):
        if name not in self:
            raise RegistryError(self.unknown_name_message(name))
        return self._entries[name]

    def __contains__(self, name):
        self.import_package()
        return name in self._entries

    def names(self):
        self.import_package()
        return sorted(self._entries)

    def unknown_name_message(self, name):
        """Says `name` is unknown and lists the registered names, the closest first."""
        names = self.names()
        # get_close_matches rejects n=0, which an empty registry would pass.
        closest = difflib.get_close_matches(name, names, n=len(names), cutoff=0.0) if names else []
        listed = ", ".join(closest) if closest else "(none)"
        return (
            f"Unknown {self.kind} '{name}'. Registered {self.kind}s (closest first): {listed}. "
            f"Run `python -m t2t_repro.trainer --registry_help` to see them all."
        )


problems = Registry("problem", package="problems")
hparams_sets = Registry("hparams set", package="hparams")
models = Registry("model", package="t2t_repro.models")
REGISTRIES = (problems, hparams_sets, models)


def import_all():
    """Imports every module that registers something (idempotent)."""
    for registry in REGISTRIES:
        registry.import_package()


def help_text():
    """The `--registry_help` listing."""
    sections = []
    for registry in REGISTRIES:
        lines = [f"{registry.kind}s ({len(registry.names())}):"]
        lines += [f"  {name}" for name in registry.names()]
        sections.append("\n".join(lines))
    return "\n\n".join(sections)
