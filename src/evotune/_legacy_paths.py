"""Import paths from before the package was grouped into config/, runs/, evaluation/ and tracking/, and from
before the bottom leaves (files/, optimizers/) and the sweep left runs/, strategies/ and backends/.

`import evotune.checkpoint` (and the other old module paths) still works, with a
DeprecationWarning naming the new path: the old name becomes an alias of the new module, so a
monkeypatch or an isinstance check through either name sees the same objects.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED = {  # old module -> where it lives now
    "config_fields": "config.fields", "config_checks": "config.checks", "config_files": "config.files",
    "eval_options": "config.eval_options", "run_directory": "runs.directory", "checkpoint": "files.checkpoint",
    "compare": "runs.compare", "run_groups": "runs.groups",
    "sweep_grid": "runs.sweep_grid", "averaging": "runs.averaging", "export": "runs.export",
    "generation": "evaluation.generation", "retention": "evaluation.retention",
    "model_card": "evaluation.model_card", "loggers": "tracking.loggers",
    "adapters": "files.adapters",
    # moved by the third pass over the layers
    "runs.checkpoint": "files.checkpoint", "runs.sweep": "sweep", "strategies.optimizers": "optimizers.rules",
    "backends.adapters": "files.adapters",
}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, new_name: str) -> None:
        self.new_name = new_name

    def create_module(self, spec):  # the new module itself, registered under the old name too
        return importlib.import_module(self.new_name)

    def exec_module(self, module) -> None:
        pass


class LegacyPathFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        root, _, old = fullname.partition(".")
        if root != "evotune" or old not in MOVED:
            return None
        new_name = f"evotune.{MOVED[old]}"
        warnings.warn(f"{fullname} moved to {new_name}; import it from there", DeprecationWarning, stacklevel=3)
        return importlib.util.spec_from_loader(fullname, _AliasLoader(new_name))


def install() -> None:
    if not any(isinstance(finder, LegacyPathFinder) for finder in sys.meta_path):
        sys.meta_path.append(LegacyPathFinder())
