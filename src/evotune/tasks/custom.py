"""The ``custom`` task: your prompts file plus your TRL-style reward functions, by import path.

Reward functions are named as ``package.module:function`` (or ``package.module.function``) so a
YAML config can refer to any code on PYTHONPATH, the same functions one would pass to TRL's
``GRPOTrainer(reward_funcs=...)``. A config therefore runs code, like a Python script: that is by
design (see the README's security note). Targets that cannot be reward functions and that only
serve to run commands or code (builtins, os, subprocess, ...) are refused, so a mistyped or
hostile `reward_fns: [os:system]` fails before anything is called.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import random
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from ..errors import ConfigError
from ..files.reward_paths import is_file_form, module_name_of, resolve_reward_spec, split_spec
from .base import RewardFn, Task
from .data import load_prompt_rows


def import_reward_fn(path: str, config_dir: Path | None = None) -> RewardFn:
    """The callable at `module:function`, `module.function` or `path/to/file.py:function`, the module looked up in
    the config's folder (config_dir), the current folder, then the installed packages and PYTHONPATH
    (files/reward_paths.py)."""
    if not isinstance(path, str) or not path.strip():
        raise ConfigError(f"reward function {path!r} is not an import path; write `package.module:function`.")
    path = path.strip()
    resolved = resolve_reward_spec(path, config_dir)
    module_name, attribute = split_spec(resolved)
    if is_file_form(module_name):
        folder, module_name = module_name_of(Path(module_name))
        _refuse_system_target(path, module_name)
        module = _import_from(path, folder, module_name)
    else:
        _refuse_system_target(path, module_name)
        module = _import_installed(path, module_name)
    target: object = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ConfigError(f"reward function {path!r}: module {module_name!r} has no attribute {attribute!r}; "
                              f"check the function name.")
        target = getattr(target, part)
    if not callable(target):
        raise ConfigError(f"reward function {path!r} is a {type(target).__name__}, not a function.")
    called = _called(target)  # a wrapper (functools.partial, a bound method, a decorator) is judged by what it calls
    _refuse_system_target(path, getattr(called, "__module__", None) or "")  # e.g. `mymodule:system` re-exporting os's
    if called is not target and (inspect.isclass(called) or inspect.isbuiltin(called)):
        raise ConfigError(f"reward function {path!r} wraps the {'class' if inspect.isclass(called) else 'built-in'} "
                          f"{getattr(called, '__qualname__', called)!r}, not a reward function fn(prompts, "
                          "completions, **columns) -> list of floats.")
    if inspect.isclass(target) or inspect.isbuiltin(target):
        raise ConfigError(f"reward function {path!r} is a {'class' if inspect.isclass(target) else 'built-in function'}"
                          f", not a reward function fn(prompts, completions, **columns) -> list of floats.")
    return target


# Modules whose callables run commands, load code or touch the interpreter: never reward functions.
SYSTEM_MODULES = frozenset({"builtins", "os", "posix", "nt", "subprocess", "sys", "shutil", "importlib", "runpy",
                            "pty", "socket", "ctypes", "multiprocessing", "signal", "pickle", "marshal", "code",
                            "codeop", "webbrowser", "pdb", "platform", "asyncio", "threading", "_thread"})


def _import_from(spec: str, folder: Path, module_name: str) -> ModuleType:
    """`module_name` imported with `folder` first on sys.path, as `python script.py` puts the script's folder (kept
    there, so the module's own imports of files beside it work as they would in that script)."""
    loaded = sys.modules.get(module_name)
    if loaded is not None and getattr(loaded, "__file__", None) and \
            not Path(loaded.__file__).resolve().is_relative_to(folder):
        raise ConfigError(f"reward function {spec!r}: a module `{module_name}` from {loaded.__file__} is already "
                          f"imported, so {folder} cannot provide another; rename your file.")
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return _import_installed(spec, module_name)


def _import_installed(spec: str, module_name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - ImportError or an error raised while importing the module
        if isinstance(exc, ModuleNotFoundError) and exc.name == module_name.split(".")[0]:
            raise ConfigError(f"reward function {spec!r}: no module `{module_name}` in the config's folder, the "
                              f"current folder ({Path.cwd()}) or the installed packages; put your reward file beside "
                              "the config (or name the file: `path/to/my_rewards.py:function`), or install its "
                              "package.") from exc
        raise ConfigError(f"reward function {spec!r}: importing module {module_name!r} failed with "
                          f"{type(exc).__name__}: {exc}") from exc


def _called(target: object) -> object:
    """The function a wrapper ends up calling: through functools.partial, bound methods and `__wrapped__` (what
    functools.wraps records), as deep as they nest."""
    seen: set[int] = set()
    while id(target) not in seen:
        seen.add(id(target))
        if isinstance(target, functools.partial):
            target = target.func
        elif inspect.ismethod(target):
            target = target.__func__
        elif getattr(target, "__wrapped__", None) is not None:
            target = target.__wrapped__
        else:
            break
    return target


def _refuse_system_target(path: str, module_name: str) -> None:
    if module_name.split(".")[0] in SYSTEM_MODULES:
        raise ConfigError(f"reward function {path!r} comes from the `{module_name}` module, which runs commands or "
                          "code rather than scoring completions; `reward_fns` must name your own reward function "
                          "(`my_rewards:length_reward`). See the README's security note.")


def resolve_reward_fns(specs: list[str | Callable], weights: list[float] | None) -> tuple[list[RewardFn], list[float]]:
    """Import each reward function (callables pass through) and pair it with a weight (default 1.0)."""
    if isinstance(specs, (str, bytes)) or not specs:
        raise ConfigError(f"`reward_fns` must be a non-empty list of import paths like "
                          f"['my_rewards:length_reward'], got {specs!r}.")
    fns = [spec if callable(spec) else import_reward_fn(spec) for spec in specs]
    if weights is None:
        weights = [1.0] * len(fns)
    if isinstance(weights, (str, bytes)) or len(weights) != len(fns):
        raise ConfigError(f"`reward_weights` has {len(weights)} entries but `reward_fns` has {len(fns)}; give one "
                          f"weight per reward function (or leave `reward_weights` unset for 1.0 each).")
    try:
        weights = [float(w) for w in weights]
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"`reward_weights` must be numbers, got {weights!r}.") from exc
    return fns, weights


def build_custom(*, seed: int = 0, num_eval: int | None = None, dataset: str | None = None,
                 eval_dataset: str | None = None, reward_fns: list[str | Callable] | None = None,
                 reward_weights: list[float] | None = None) -> Task:
    """Rows from ``dataset`` scored by ``reward_fns``.

    Eval rows come from ``eval_dataset`` (its first ``num_eval`` rows if that is set) or else a seeded
    hold-out of ``num_eval`` rows (default 10% of the rows, at least 1 and at most 128).
    """
    if not dataset:
        raise ConfigError("task `custom` needs `dataset`: a .jsonl/.json/.csv/.parquet file with a `prompt` column "
                          "(or a Hugging Face dataset name).")
    if not reward_fns:
        raise ConfigError("task `custom` needs `reward_fns`: a list of import paths like "
                          "['my_rewards:length_reward'] with TRL's signature fn(prompts, completions, **columns).")
    rows, eval_rows = load_prompt_rows(dataset, eval_dataset)
    return custom_task(rows, eval_rows, reward_fns, reward_weights, seed=seed, num_eval=num_eval, source=dataset)


def custom_task(rows: list[dict], eval_rows: list[dict] | None, reward_fns: list[str | Callable],
                reward_weights: list[float] | None, seed: int = 0, num_eval: int | None = None,
                source: str = "dataset") -> Task:
    """The custom task over rows already in memory (files above; `datasets.Dataset` objects in ESTrainer).

    Eval rows are ``eval_rows`` (the first ``num_eval`` of them if that is set) or else a seeded hold-out of
    ``num_eval`` rows (default 10% of the rows, at least 1 and at most 128), the same split on every path."""
    fns, weights = resolve_reward_fns(reward_fns, reward_weights)
    if eval_rows is not None:
        if num_eval is not None:
            eval_rows = eval_rows[:num_eval]
        train_rows = rows
    else:
        if num_eval is None:
            num_eval = max(1, min(128, len(rows) // 10)) if len(rows) >= 2 else 0
        if len(rows) < 2:  # nothing to hold out: a split leaves no row to train on, or none to score
            raise ConfigError(f"dataset {source!r} has {len(rows)} row, too few to split into training and held-out "
                              f"rows: add rows, or give held-out rows as `eval_dataset` (to score this file's own "
                              f"row, give it as `eval_dataset` too: evotune eval --eval-dataset {source}).")
        if not isinstance(num_eval, int) or isinstance(num_eval, bool) or not 0 < num_eval < len(rows):
            raise ConfigError(f"`num_eval` must be an integer from 1 to {len(rows) - 1} for dataset {source!r} "
                              f"({len(rows)} rows, and training needs at least one), got {num_eval!r}; or give "
                              f"`eval_dataset`.")
        order = list(range(len(rows)))
        random.Random(f"custom-{seed}").shuffle(order)
        eval_rows = [rows[i] for i in order[:num_eval]]
        train_rows = [rows[i] for i in order[num_eval:]]
    return Task(name="custom", train_rows=train_rows, eval_rows=eval_rows, reward_fns=fns, reward_weights=weights)
