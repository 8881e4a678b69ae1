"""What a training run's folder records about the run: its hparams (hparams.json), the flags in
its flags.txt, and so the problem it was trained on. A run written from Python records them as
one the trainer writes does, so that every command, fine-tuning and ensembles read either."""

import os

from t2t_repro.errors import ConfigurationError
from t2t_repro.names import FLAGS_FILENAME, HPARAMS_FILENAME, PATH_FLAGS
from t2t_repro.utils.atomic_files import write_text_atomically


def flag_line(name, value):
    """`--name=value` as flags.txt records it: a path flag's value made absolute against the
    working folder, as the commands resolve it."""
    if name in PATH_FLAGS:
        value = os.path.abspath(value)
    return f"--{name}={value}"


def unresolvable(name, recorded):
    """Whether `recorded`, the value flags.txt gives the flag `name`, is a relative path (as
    runs recorded paths before they recorded them absolute) that names nothing from this
    working folder: it was relative to the folder the run was trained from, unknown here."""
    return name in PATH_FLAGS and not os.path.isabs(recorded) and not os.path.exists(recorded)


def unresolvable_error(run_dir, name, recorded, remedy):
    """The ConfigurationError for an `unresolvable` recorded path; `remedy`: what to do."""
    return ConfigurationError(
        f"{os.path.join(run_dir, FLAGS_FILENAME)} records --{name}={recorded}, relative to the "
        f"folder the run was trained from, and {os.getcwd()} has no such path; {remedy}.")


def check_saved_hparams(run_dir, hparams, reading=False):
    """ConfigurationError naming the hparams that differ when `run_dir` holds a run trained with
    others: its checkpoints hold other weights, or were made by another recipe. A folder whose
    run wrote no checkpoint (it stopped before one, out of memory say) holds nothing trained,
    and takes other hparams. `reading`: the command reads the trained model (decodes, exports),
    and the advice is to read it with its own hparams rather than to train elsewhere."""
    from t2t_repro import hparams as hparams_lib
    from t2t_repro.training import checkpoints

    saved = hparams_lib.load(run_dir)
    if saved is None or not checkpoints.list_checkpoints(run_dir):
        return
    saved = hparams_lib.with_added_model_hparams(saved, hparams)
    if saved != hparams:
        remedy = (f"Leave out --hparams_set and the --hparams that change them, and the model "
                  f"is read with its own ({run_dir}/{HPARAMS_FILENAME})." if reading else
                  f"Use the same hparams set and overrides (see {run_dir}/{HPARAMS_FILENAME} "
                  f"and {FLAGS_FILENAME}), or another output folder.")
        differing = hparams_lib.differences_text(hparams, saved, "the run's")
        raise ConfigurationError(
            f"{run_dir} holds a run trained with other hparams: {differing}. {remedy}")


def save_run_record(run_dir, hparams, problem, model_name):
    """Writes `run_dir`/hparams.json, and a flags.txt naming the problem, its data folder and
    the model unless the run has one (the trainer writes all its flags there)."""
    from t2t_repro import hparams as hparams_lib

    hparams_lib.save(hparams, run_dir)
    if os.path.exists(os.path.join(run_dir, FLAGS_FILENAME)):
        return
    recorded = {"problem": problem.name, "data_dir": problem.data_dir, "model": model_name,
                "output_dir": run_dir}
    write_text_atomically(os.path.join(run_dir, FLAGS_FILENAME), "".join(
        flag_line(name, value) + "\n" for name, value in recorded.items() if value))


def recorded_flags(run_dir):
    """{name: value text} of the `--name=value` lines in `run_dir`/flags.txt ({} if none)."""
    path = os.path.join(run_dir, FLAGS_FILENAME)
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        pairs = (line.strip()[2:].split("=", 1) for line in f if line.startswith("--"))
        return {pair[0]: pair[1] for pair in pairs if len(pair) == 2}


def check_recorded_problem(run_dir, problem_name):
    """ConfigurationError when `run_dir`'s flags.txt records another problem than
    `problem_name`: its checkpoints learned that problem, and resuming or evaluating them on
    another (a reversed direction shares its vocabulary) would mix the two without a word."""
    recorded = recorded_flags(run_dir).get("problem")
    if recorded is not None and recorded != problem_name:
        flags_path = os.path.join(run_dir, FLAGS_FILENAME)
        raise ConfigurationError(
            f"--problem={problem_name} disagrees with --problem={recorded} that {flags_path} "
            f"records for this run; resume it with --flagfile={flags_path}, or train "
            f"{problem_name} in another --output_dir (--warm_start_from={run_dir} starts from "
            f"its weights).")


def run_dir_of(checkpoint):
    """The run folder `checkpoint` belongs to: the one holding hparams.json, beside the
    checkpoint or one folder above (a checkpoint in `<run>/best`); None if neither does."""
    folder = os.path.dirname(os.path.abspath(checkpoint))
    for candidate in (folder, os.path.dirname(folder)):
        if os.path.exists(os.path.join(candidate, HPARAMS_FILENAME)):
            return candidate
    return None


def recorded_problem(run_dir):
    """The problem `run_dir`'s flags.txt names, over the data folder and with the data hparams
    it records; None when it names none. A problem not registered here is a
    ConfigurationError: its vocabulary and data cannot be read without its code; so is a data
    folder recorded as a relative path that names nothing from here (`unresolvable`)."""
    from t2t_repro import registry

    recorded = recorded_flags(run_dir)
    name = recorded.get("problem")
    if name is None:
        return None
    if name not in registry.problems:
        raise ConfigurationError(f"{run_dir} was trained on problem {name}, which is not "
                                 f"registered here; give the --t2t_usr_dir that registers it.")
    data_dir = recorded.get("data_dir")
    if data_dir and unresolvable("data_dir", data_dir):
        raise unresolvable_error(run_dir, "data_dir", data_dir,
                                 "run the command from that folder, or make the path absolute "
                                 "there")
    return registry.problems[name](data_dir=data_dir,
                                   data_hparams=recorded.get("data_hparams", ""))


def copy_run_record(run_dir, to_dir):
    """Copies `run_dir`'s hparams.json and flags.txt into `to_dir`, flags.txt's --output_dir
    pointed at `to_dir`: `--flagfile=<to_dir>/flags.txt` then reads `to_dir`'s checkpoints
    (averaged ones, say), not the run's."""
    hparams_path = os.path.join(run_dir, HPARAMS_FILENAME)
    if os.path.exists(hparams_path):
        with open(hparams_path, encoding="utf-8") as f:
            write_text_atomically(os.path.join(to_dir, HPARAMS_FILENAME), f.read())
    flags_path = os.path.join(run_dir, FLAGS_FILENAME)
    if os.path.exists(flags_path):
        with open(flags_path, encoding="utf-8") as f:
            lines = [flag_line("output_dir", to_dir) if line.startswith("--output_dir=")
                     else line for line in f.read().splitlines()]
        write_text_atomically(os.path.join(to_dir, FLAGS_FILENAME),
                              "".join(line + "\n" for line in lines))
