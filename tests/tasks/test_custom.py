"""evotune.tasks.custom: reward functions named by import path; those that are system calls (os, builtins,
subprocess, ...) are refused before anything runs, even when a user module re-exports one."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from evotune.errors import ConfigError

BAD_REWARD_TARGETS = ["os:system", "os.system", "builtins:eval", "builtins:exec", "subprocess:run",
                      "subprocess:check_output", "shutil:rmtree", "importlib:import_module",
                      "test_custom:system", "collections:Counter", "math:sqrt"]

system = os.system  # a re-export, as a user module could have: refused by the function's own module


@pytest.mark.parametrize("target", BAD_REWARD_TARGETS)
def test_system_targets_are_refused_as_reward_functions(target, tmp_path, monkeypatch):
    from evotune.tasks import get_task

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    calls = []
    monkeypatch.setattr(os, "system", lambda *args: calls.append(args) or 0)
    with pytest.raises(ConfigError, match=re.escape(target)):
        get_task("arithmetic", reward_fns=[target])
    assert calls == []


def test_a_real_reward_function_is_still_accepted():
    from evotune.tasks import get_task

    task = get_task("arithmetic", reward_fns=["evotune.tasks:conciseness_reward"])
    assert task.reward_fns[0].__name__ == "conciseness_reward"

