"""Where a reward named in a config is found: the config's folder, the current folder, then the installed packages
(files/reward_paths.py). A local module is recorded as its absolute file, so a run's config.yaml names the file that
scored it; a name two places could mean is refused naming both; the security rule still holds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from evotune.config.files import read_config_values
from evotune.errors import ConfigError
from evotune.files.reward_paths import resolve_reward_spec, shipped
from evotune.tasks.custom import import_reward_fn

REWARD = "def exact_match(prompts, completions, answer, **kwargs):\n    return [float(c == a) for c, a in " \
         "zip(completions, answer)]\n"


@pytest.fixture
def folders(tmp_path, monkeypatch):
    """A project folder holding a config and its reward module, and another folder to run from."""
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    name = f"rewards_{tmp_path.name.replace('-', '_')}"  # a module name no other test imports
    (project / f"{name}.py").write_text(REWARD)
    (project / "task.yaml").write_text(f"task: custom\ndataset: d.jsonl\nreward_fns: [{name}.exact_match]\n")
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the folder import_reward_fn puts on sys.path goes again
    yield project, elsewhere, name
    sys.modules.pop(name, None)


def test_a_module_beside_the_config_is_found_from_another_folder_and_recorded_as_its_file(folders):
    project, _, name = folders
    values, _ = read_config_values(project / "task.yaml")
    assert values["reward_fns"] == [f"{project / name}.py:exact_match"]
    reward = import_reward_fn(values["reward_fns"][0])
    assert reward(["q"], ["4"], answer=["4"]) == [1.0] and Path(sys.modules[name].__file__) == project / f"{name}.py"


def test_a_module_in_the_current_folder_is_found_for_a_set_override(folders, monkeypatch):
    project, elsewhere, name = folders
    (elsewhere / "mine.py").write_text(REWARD.replace("exact_match", "mine"))
    values, _ = read_config_values(project / "task.yaml", ["reward_fns=[mine:mine]"])
    assert values["reward_fns"] == [f"{elsewhere / 'mine.py'}:mine"]
    sys.modules.pop("mine", None)


def test_the_same_name_in_both_folders_is_refused_naming_both(folders):
    project, elsewhere, name = folders
    (elsewhere / f"{name}.py").write_text(REWARD + "# another version\n")
    with pytest.raises(ConfigError) as error:
        read_config_values(project / "task.yaml")
    assert str(project / f"{name}.py") in str(error.value) and str(elsewhere / f"{name}.py") in str(error.value)


def test_two_copies_of_one_file_are_one_candidate(folders):
    """Identical bytes are the same code (a Ray worker's py_modules copy beside a user's file, say)."""
    project, elsewhere, name = folders
    (elsewhere / f"{name}.py").write_text(REWARD)
    values, _ = read_config_values(project / "task.yaml")
    assert values["reward_fns"] == [f"{project / name}.py:exact_match"]


def test_a_local_file_an_installed_module_would_shadow_is_refused_naming_both(folders):
    project, _, _ = folders
    (project / "json.py").write_text(REWARD)
    with pytest.raises(ConfigError, match=r"`json` means both your .*json.py and .*lib.*json"):
        resolve_reward_spec("json:exact_match", project)


def test_an_installed_module_is_left_as_named_and_a_missing_one_says_where_it_looked(folders):
    assert resolve_reward_spec("evotune.tasks:conciseness_reward", None) == "evotune.tasks:conciseness_reward"
    assert import_reward_fn("evotune.tasks:conciseness_reward").__name__ == "conciseness_reward"
    with pytest.raises(ConfigError, match="no module `nowhere_xyz` in the config's folder, the current folder"):
        import_reward_fn("nowhere_xyz:fn")


def test_a_file_path_is_taken_relative_to_the_config_and_a_missing_one_is_named(folders):
    project, _, name = folders
    assert resolve_reward_spec(f"./{name}.py:exact_match", project) == f"{project / name}.py:exact_match"
    with pytest.raises(ConfigError, match="no file .*absent.py"):
        resolve_reward_spec("absent.py:fn", project)


def test_a_package_beside_the_config_keeps_its_dotted_name(folders):
    project, _, name = folders
    package = project / f"pkg_{name}"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "scoring.py").write_text("from .helpers import ONE\n\ndef score(prompts, completions, **kw):\n"
                                        "    return [ONE] * len(completions)\n")
    (package / "helpers.py").write_text("ONE = 1.0\n")
    spec = resolve_reward_spec(f"pkg_{name}.scoring:score", project)
    assert spec == f"{package / 'scoring.py'}:score"
    assert import_reward_fn(spec)(["q"], ["a"]) == [1.0]  # its relative import works
    assert shipped([spec]) == ([f"pkg_{name}.scoring:score"], [str(package)])
    for module in [m for m in sys.modules if m.startswith(f"pkg_{name}")]:
        sys.modules.pop(module)


def test_shipping_names_the_file_for_ray_and_leaves_installed_rewards_alone(folders):
    project, _, name = folders
    local = f"{project / name}.py:exact_match"
    assert shipped([local, "evotune.tasks:conciseness_reward"]) == (
        [f"{name}:exact_match", "evotune.tasks:conciseness_reward"], [f"{project / name}.py"])


def test_a_system_target_is_refused_wherever_it_is_written(folders):
    project, _, _ = folders
    (project / "wrapper.py").write_text("from os import system\n")
    for spec in ("os:system", "subprocess:run", "builtins:eval", f"{project / 'wrapper.py'}:system"):
        with pytest.raises(ConfigError, match="runs commands or code"):
            import_reward_fn(spec)
    sys.modules.pop("wrapper", None)


@pytest.mark.parametrize("wrapper", [
    "import functools, os\nreward = functools.partial(os.system)\n",
    "import functools, subprocess\nreward = functools.partial(functools.partial(subprocess.run, shell=True))\n",
    "import functools, os\n@functools.wraps(os.system)\ndef reward(*args):\n    return os.system(*args)\n",
    "import builtins\nclass Runner:\n    def go(self, prompts, completions):\n        pass\nRunner.go.__wrapped__ = "
    "builtins.eval\nreward = Runner().go\n",
])
def test_a_wrapper_is_judged_by_the_function_it_calls(folders, wrapper):
    """functools.partial(os.system) passed the guard and os.system was called; wrappers are unwrapped first."""
    project, _, _ = folders
    (project / "wrapped.py").write_text(wrapper)
    with pytest.raises(ConfigError, match="runs commands or code"):
        import_reward_fn(f"{project / 'wrapped.py'}:reward")
    sys.modules.pop("wrapped", None)


def test_a_partial_of_a_users_own_reward_is_accepted(folders):
    project, _, _ = folders
    (project / "weighted.py").write_text("import functools\n\ndef score(prompts, completions, scale=1.0, **kw):\n"
                                         "    return [scale] * len(completions)\n\nhalf = functools.partial(score, "
                                         "scale=0.5)\n")
    assert import_reward_fn(f"{project / 'weighted.py'}:half")(["q"], ["a"]) == [0.5]
    sys.modules.pop("weighted", None)
