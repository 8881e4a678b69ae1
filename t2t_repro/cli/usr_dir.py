"""--t2t_usr_dir: a user's folder of problems, hparams sets and models, imported before any
registry lookup, so its `@registry.register...` decorators run (tensor2tensor's flag).

The folder is either a Python package (it has `__init__.py`, which imports its modules) or a
plain folder of modules, each of which is imported.
"""

import importlib
import importlib.util
import os
import sys
import traceback

from absl import flags

from t2t_repro.errors import UserError

flags.DEFINE_string("t2t_usr_dir", None,
                    "A folder of your own problems, hparams sets and models (a Python package, "
                    "or a folder of .py modules) registered with t2t_repro.registry; imported "
                    "before anything is looked up.")


class UsrDirError(UserError):
    """The --t2t_usr_dir folder is missing, clashes with a module, or fails to import."""


def _inside(path, folder):
    return os.path.realpath(path).startswith(folder + os.sep) or os.path.realpath(path) == folder


def _import(name, folder):
    """Imports module `name`; its errors become UsrDirError naming the user's line."""
    try:
        importlib.import_module(name)
    except Exception as error:  # noqa: BLE001 - any error in user code is reported the same way
        frames = [frame for frame in traceback.extract_tb(error.__traceback__)
                  if _inside(frame.filename, folder)]
        where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        raise UsrDirError(f"--t2t_usr_dir={folder} failed to import{where}: "
                          f"{type(error).__name__}: {error}") from error


def _check_name_is_free(name, folder):
    """Raises if module `name` resolves to something outside `folder` (a folder called `json`
    or `problems`), which would otherwise be imported in its place, silently."""
    module = sys.modules.get(name)
    spec = module.__spec__ if module is not None else importlib.util.find_spec(name)
    if spec is None:
        return
    locations = list(spec.submodule_search_locations or []) or [spec.origin or name]
    if not any(_inside(location, folder) for location in locations):
        raise UsrDirError(f"--t2t_usr_dir={folder}: the module name '{name}' is already taken "
                          f"by {locations[0]}; rename your folder or module.")


def import_usr_dir(path):
    """Imports the user's folder `path`: its package, or each of its top-level modules."""
    folder = os.path.realpath(os.path.expanduser(path))
    if not os.path.isdir(folder):
        raise UsrDirError(f"--t2t_usr_dir={path} is not a folder; give the folder that holds "
                          f"your problems, hparams sets and models.")
    if os.path.isfile(os.path.join(folder, "__init__.py")):
        parent, names = os.path.dirname(folder), [os.path.basename(folder)]
    else:
        parent = folder
        names = sorted(entry[:-3] for entry in os.listdir(folder)
                       if entry.endswith(".py") and not entry.startswith("."))
        if not names:
            raise UsrDirError(f"--t2t_usr_dir={path} holds no __init__.py and no .py modules.")
    for name in names:
        _check_name_is_free(name, folder)
    # Kept on the path: the user's modules may import each other, and a model loaded later may
    # import from them.
    if parent not in sys.path:
        sys.path.insert(0, parent)
    for name in names:
        _import(name, folder)


def import_flagged_usr_dir():
    """Imports --t2t_usr_dir when given, and makes the flag an absolute path (the trainer's
    flags.txt then works from any folder); raises UsrDirError if that fails."""
    if flags.FLAGS.t2t_usr_dir:
        import_usr_dir(flags.FLAGS.t2t_usr_dir)
        flags.FLAGS.t2t_usr_dir = os.path.abspath(os.path.expanduser(flags.FLAGS.t2t_usr_dir))
