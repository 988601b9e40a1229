"""Where a reward function named in a config lives: the config's own folder, the current folder, then the installed
packages and PYTHONPATH, in that order (as `python my_script.py` finds the modules beside the script).

A config names a reward as `module:function` (or `module.function`), or as a file, `path/to/rewards.py:function`.
`resolve_reward_spec` turns a module found in one of the two folders into the file form with an absolute path, so
the run's config.yaml names the very file that scored it, and `evotune eval RUN_DIR`, `--resume` and a Ray pool find
it again from any folder. A name that two places could mean (the same module beside the config and in the current
folder, or a local file that an installed module of the same name would shadow) is refused, naming both: a reward
is never taken from a file the user did not mean.

Only file-system lookups happen here; the module is imported (and runs) in tasks/custom.py.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ..errors import ConfigError


def split_spec(spec: str) -> tuple[str, str]:
    """(module or file, attribute) of `module:function`, `module.function` or `path/to/file.py:function`."""
    spec = spec.strip()
    if ":" in spec:
        module, _, attribute = spec.rpartition(":")  # rpartition: a Windows drive letter keeps its colon
    else:
        module, _, attribute = spec.rpartition(".")
    if not module or not attribute:
        raise ConfigError(f"reward function {spec!r} is not an import path; write `module:function` (e.g. "
                          f"`my_rewards:exact_match`) or `path/to/my_rewards.py:exact_match`.")
    return module, attribute


def is_file_form(module: str) -> bool:
    """`path/to/rewards.py` (a file) rather than `package.module` (a name)."""
    return module.endswith(".py") or "/" in module or os.sep in module


def installed_origin(top: str, local_folders: Sequence[Path]) -> str | None:
    """Where `top` would be imported from if the local folders were not searched: a built-in or frozen module, one
    already imported from elsewhere, or a module on sys.path (installed packages, PYTHONPATH); else None."""
    if top in sys.builtin_module_names or importlib.machinery.FrozenImporter.find_spec(top) is not None:
        return f"Python's built-in module `{top}`"
    local = {folder.resolve() for folder in local_folders}
    loaded = sys.modules.get(top)
    if loaded is not None and getattr(loaded, "__file__", None):
        origin = Path(loaded.__file__).resolve()
        if not any(origin.is_relative_to(folder) for folder in local):
            return str(origin)
    path = [entry for entry in sys.path if Path(entry or os.getcwd()).resolve() not in local]
    spec = importlib.machinery.PathFinder.find_spec(top, path)
    return None if spec is None else str(spec.origin or (spec.submodule_search_locations or [top])[0])


def search_folders(config_dir: Path | None) -> list[Path]:
    """The local folders a reward module is looked up in, in order: the config's folder, then the current one."""
    folders = [] if config_dir is None else [config_dir.resolve()]
    cwd = Path.cwd().resolve()
    return folders if cwd in folders else [*folders, cwd]


def resolve_reward_spec(spec: object, config_dir: Path | None = None) -> object:
    """`spec` with its module replaced by the absolute path of the local file that holds it, when the config's folder
    (config_dir) or the current folder holds it; a spec naming an installed module, or not a string, unchanged.

    Refuses a spec that two places could mean (both folders, or a local file and an installed module), naming them."""
    if not isinstance(spec, str) or not spec.strip():
        return spec  # TrainConfig's checks say what is wrong with it
    module, attribute = split_spec(spec)
    folders = search_folders(config_dir)
    if is_file_form(module):
        candidates = [Path(module)] if Path(module).is_absolute() else [(folder / module).resolve()
                                                                      for folder in folders]
        found = list(dict.fromkeys(path for path in candidates if path.is_file()))
        if not found:
            where = " or ".join(str(path) for path in dict.fromkeys(candidates))
            raise ConfigError(f"reward function {spec!r}: no file {where}; give the path of your reward module, "
                              "relative to the config's folder or the current one.")
    else:
        found = list(dict.fromkeys(hit for folder in folders if (hit := _module_file(folder, module)) is not None))
        if not found:
            return spec  # an installed module or one on PYTHONPATH: import_reward_fn finds it or says where it looked
    found = _distinct(found)
    if len(found) > 1:
        raise ConfigError(f"reward function {spec!r}: it could mean {found[0]} (beside the config) or {found[1]} "
                          f"(in the current folder); run from the config's folder, or name the file itself: "
                          f"`reward_fns: [{found[0]}:{attribute}]`.")
    folder, name = module_name_of(found[0])
    other = installed_origin(name.split(".")[0], [folder])
    if other is not None and not _same_file(Path(other), found[0]):  # a copy (Ray's py_modules) is no other code
        raise ConfigError(f"reward function {spec!r}: the module name `{name.split('.')[0]}` means both your "
                          f"{found[0]} and {other}, which Python would import instead; rename your file (e.g. "
                          f"`my_{name.split('.')[0]}.py`) and the reward_fns entry with it.")
    return f"{found[0]}:{attribute}"


def _same_file(one: Path, other: Path) -> bool:
    try:
        return one.is_file() and other.is_file() and one.read_bytes() == other.read_bytes()
    except OSError:
        return False


def _distinct(paths: list[Path]) -> list[Path]:
    """`paths` less those whose bytes equal an earlier one's: two copies of one file are not two candidates."""
    kept: list[Path] = []
    for path in paths:
        if not any(_same_file(path, earlier) for earlier in kept):
            kept.append(path)
    return kept


def _module_file(folder: Path, module: str) -> Path | None:
    """The file that `import module` (dotted) would load with `folder` first on sys.path, or None."""
    base = folder.joinpath(*module.split("."))
    for candidate in (base.with_name(base.name + ".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate.resolve()
    return None


def module_name_of(path: Path) -> tuple[Path, str]:
    """(the folder to put on sys.path, the dotted module name) of a resolved reward file: a package's module keeps
    its dotted name from the outermost folder that holds an `__init__.py`."""
    path = path.resolve()
    parts = [path.stem] if path.name != "__init__.py" else []
    folder = path.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    return folder, ".".join(parts)


def shipped(specs: Sequence[object]) -> tuple[list[object], list[str]]:
    """For workers on other machines (a Ray pool): each spec naming a local file in name form (`my_rewards:fn`),
    and the files or package folders that carry those modules (Ray's runtime_env `py_modules`, which puts each on
    the workers' sys.path)."""
    names, modules = [], []
    for spec in specs:
        if not isinstance(spec, str) or not is_file_form(split_spec(spec)[0]):
            names.append(spec)
            continue
        module, attribute = split_spec(spec)
        folder, name = module_name_of(Path(module))
        top = name.split(".")[0]
        carrier = folder / (top if (folder / top).is_dir() else f"{top}.py")
        names.append(f"{name}:{attribute}")
        if str(carrier) not in modules:
            modules.append(str(carrier))
    return names, modules
