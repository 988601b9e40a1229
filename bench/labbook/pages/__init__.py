"""Every lab-book page's module, found by name: a module here with a `PAGE` is a page of docs/benchmarks/."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from functools import partial
from types import ModuleType

from bench.labbook.machines import machines_text
from bench.labbook.spec import StudyPage


def modules() -> list[ModuleType]:
    return [importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__)
            if not info.name.startswith("_")]


def pages() -> list[StudyPage]:
    return sorted((module.PAGE for module in modules() if hasattr(module, "PAGE")),
                  key=lambda page: (page.order, page.slug))


def claims() -> dict[str, Callable[[], str]]:
    """The claims the pages define for themselves (their meaning sentences), and each page's machines line
    (SLUG-machines); bench.claims merges them."""
    found: dict[str, Callable[[], str]] = {f"{page.slug}-machines": partial(machines_text, page.files)
                                           for page in pages()}
    for module in modules():
        for name, function in getattr(module, "CLAIMS", {}).items():
            if name in found:
                raise ValueError(f"claim {name!r} is defined by two lab-book pages")
            found[name] = function
    return found
