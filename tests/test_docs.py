"""The documentation: the MkDocs site builds with --strict, the README stays short and keeps CI's own
commands, the security page names what runs code, the API reference has a docstring for every public
class and function it documents, and the Configs page lists every config key."""

from __future__ import annotations

import dataclasses
import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _missing_docs_packages() -> list[str]:
    missing = [name for name in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers")
               if importlib.util.find_spec(name) is None]
    if not missing and importlib.util.find_spec("mkdocstrings_handlers.python") is None:
        missing.append("mkdocstrings_handlers.python")
    return missing


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built once with `mkdocs build --strict` (a broken link, anchor or page fails it)."""
    missing = _missing_docs_packages()
    if missing:
        pytest.skip(f"documentation packages not installed ({', '.join(missing)}): "
                    "pip install mkdocs-material 'mkdocstrings[python]' (part of `pip install -e .[dev]`)")
    site_dir = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                             str(ROOT / "mkdocs.yml"), "--site-dir", str(site_dir)],
                            cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert result.returncode == 0, "mkdocs build --strict failed:\n" + result.stdout[-4000:] + result.stderr[-8000:]
    return site_dir


def test_mkdocs_build_strict_succeeds(site):
    for page in ("index.html", "essa/index.html", "configs/index.html", "api/index.html",
                 "architecture/index.html", "benchmark-tables/index.html", "benchmarks/index.html",
                 "benchmarks/drift/index.html", "benchmarks/plots/drift/drift_arithmetic.png"):
        assert (site / page).is_file(), page
    api = (site / "api" / "index.html").read_text()
    assert "OpenES" in api and "CMAES" in api, "the API reference rendered no strategies"


def test_the_repository_link_comes_from_the_environment_and_is_absent_without_it(monkeypatch):
    """No public address is written anywhere, so none is made up: the header's repository link is the one the
    publisher gives (EVOTUNE_REPOSITORY_URL), and a build without it has no link at all."""
    pytest.importorskip("mkdocs", reason="mkdocs comes with the dev extra")
    from mkdocs.config import load_config

    monkeypatch.delenv("EVOTUNE_REPOSITORY_URL", raising=False)
    assert load_config(str(ROOT / "mkdocs.yml"))["repo_url"] is None
    monkeypatch.setenv("EVOTUNE_REPOSITORY_URL", "https://git.example.org/evotune")
    config = load_config(str(ROOT / "mkdocs.yml"))
    assert config["repo_url"] == "https://git.example.org/evotune" and config["repo_name"]  # the header shows both


def ci_commands() -> list[str]:
    """The commands .ci/run runs (the lines after `cd`, without `set` and comments)."""
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    return [line for line in lines if line and not line.startswith(("#", "set ", "cd "))]


def test_readme_is_short_and_has_the_ci_install_and_test_commands():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 150, "README.md is 150 lines or more: move the detail into docs/guides/"
    commands = ci_commands()
    # the README's install (a virtual environment in the checkout, then setup), the fast tier, then the engine tier
    assert commands == ["python3 -m venv .venv && . .venv/bin/activate", "bash scripts/setup.sh",
                        'python3 -m pytest -m "not slow and not engine and not gpu" -q -n 2 --dist loadfile',
                        'python3 -m pytest -m "(engine or slow) and not gpu" -q -n 2 --dist loadfile']
    for command in commands:
        assert command in readme, f"README.md lacks CI's command {command!r}"
    assert ".venv/" in (ROOT / ".gitignore").read_text().splitlines()  # the README's venv is not working tree


def test_readme_links_to_docs_pages_that_exist():
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\((docs/[^)#\s]+)", readme)
    assert links, "README.md links to no docs page"
    for link in links:
        assert (ROOT / link).is_file(), f"README.md links to {link}, which does not exist"


def test_security_page_names_reward_functions_trust_remote_code_and_pickle():
    page = (DOCS / "security.md").read_text()
    assert "reward_fns" in page and "trust_remote_code" in page and "pickle" in page


def api_targets() -> list[str]:
    """The objects the API pages document (`::: evotune.x` lines)."""
    targets = []
    for page in sorted((DOCS / "api").glob("*.md")):
        targets += re.findall(r"^::: (evotune[\w.]*)\s*$", page.read_text(), flags=re.M)
    return targets


# Public classes and functions of the documented modules that have no docstring yet. A new public object
# without one fails the test below; once one of these gets its docstring, remove it from this list.
def public_objects_without_docstring() -> set[str]:
    """Every public (no leading underscore) class and module-level function the API pages document, by the
    name it is documented under, that has no docstring. Read statically with griffe, as mkdocstrings does."""
    griffe = pytest.importorskip("griffe", reason="griffe comes with mkdocstrings[python] (the dev extra)")
    package = griffe.load("evotune", search_paths=[str(ROOT / "src")], resolve_aliases=False)
    missing = set()
    for target in api_targets():
        obj = package[target.removeprefix("evotune.")] if target != "evotune" else package
        if obj.is_alias:
            obj = obj.final_target
        if obj.is_module:
            if obj.exports is not None:  # __all__: the names the package documents, wherever defined
                names = [str(name) for name in obj.exports]
            else:
                names = [name for name, member in obj.members.items() if not member.is_alias]
            members = {name: obj[name] for name in names if not name.startswith("_")}
        else:
            members = {target.rsplit(".", 1)[1]: obj}
            target = target.rsplit(".", 1)[0]
        for name, member in members.items():
            if member.is_alias:
                try:
                    member = member.final_target
                except Exception:  # an import from outside evotune: not evotune's to document
                    continue
            if member.is_class or member.is_function:
                if member.docstring is None or not member.docstring.value.strip():
                    missing.add(f"{target}.{name}")
    return missing


def test_every_documented_public_class_and_function_has_a_docstring():
    missing = sorted(public_objects_without_docstring())
    assert not missing, f"public classes/functions in the API reference without a docstring: {missing}"


def load_hooks():
    spec = importlib.util.spec_from_file_location("evotune_docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def config_classes() -> dict[str, type]:
    from evotune.baselines.grpo import GRPORunConfig
    from evotune.config import TrainConfig
    from evotune.sft import SFTConfig

    return {"train": TrainConfig, "sft": SFTConfig, "grpo": GRPORunConfig}


def test_the_key_pages_quote_every_config_key_of_each_command():
    """Each command's keys page quotes its grouped table (a claim: tests/test_claims.py keeps it equal to the code):
    every field of the config class once, each with its anchor, in sections named after the source's comments."""
    from bench.claims.reference import grouped_keys

    pages = {"train": "keys-train.md", "sft": "keys-sft-grpo.md", "grpo": "keys-sft-grpo.md"}
    for which, config_class in config_classes().items():
        page = (DOCS / pages[which]).read_text()
        assert f"<!-- claim:keys-{which} -->" in page, f"{pages[which]} lost {which}'s keys"
        fields = [field.name for field in dataclasses.fields(config_class)]
        grouped = grouped_keys(which)
        anchored = re.findall(rf'^\| <a id="{which}-(\w+)"></a>`(\w+)` \|', grouped, flags=re.M)
        assert sorted(key for key, _ in anchored) == sorted(fields) and all(a == b for a, b in anchored)
        assert grouped.count("### ") >= 2, f"{which}'s keys are not grouped"


def test_built_configs_page_lists_every_config_key(site):
    page = "".join(html.unescape((site / name / "index.html").read_text()) for name in ("keys-train", "keys-sft-grpo"))
    rows = set(re.findall(r"<tr>\s*<td>(?:<a id=\"\w+-\w+\"></a>)?<code>(\w+)</code></td>", page))
    for which, config_class in config_classes().items():
        missing = [field.name for field in dataclasses.fields(config_class) if field.name not in rows]
        assert not missing, f"the built Configs page lacks the {which} keys {missing}"


def test_architecture_page_gets_the_import_graph_of_the_source():
    hooks = load_hooks()
    graph = hooks.import_graph()
    assert graph.startswith("```mermaid") and "strategies --> types" in graph
    assert "<!-- import-graph -->" in (DOCS / "architecture.md").read_text()


def test_test_files_named_in_the_docs_exist():
    """The docs name test files without their directory (tests/ is reorganised into folders), so a test
    file named on a page must exist somewhere under tests/."""
    existing = {path.name for path in (ROOT / "tests").rglob("test_*.py")}
    for page in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        for name in set(re.findall(r"\b(test_\w+\.py)\b", page.read_text())):
            assert name in existing, f"{page.relative_to(ROOT)} names {name}, which is not under tests/"


def test_bench_scripts_named_in_the_docs_and_bench_exist():
    """Every `bench/...py` or `bench/...sh` that README.md, docs/ or bench/ names (scripts, READMEs, the result
    files' recorded commands) exists, so moving a script without updating its references fails here."""
    named = re.compile(r"\bbench/[a-z0-9_/.-]*?[a-z0-9]\.(?:py|sh)\b")  # lowercase: placeholders are not paths
    pages = [ROOT / "README.md", *DOCS.rglob("*.md"), *DOCS.rglob("*.py")]
    pages += [path for path in (ROOT / "bench").rglob("*")
              if path.suffix in {".md", ".py", ".sh", ".yaml", ".json"} and path.is_file()]
    missing = {(str(page.relative_to(ROOT)), name) for page in pages for name in named.findall(page.read_text())
               if not (ROOT / name).is_file()}
    assert not missing, f"bench scripts named but not there (page, path): {sorted(missing)}"


def test_bench_scripts_are_run_as_modules_of_the_bench_package():
    """Every bench command the pages, the scripts and the result files give is `python -m bench.STUDY.SCRIPT` naming a
    module that exists (the gpu_check carry, stdlib only and copied to machines without the checkout, runs as a file),
    and no bench script edits sys.path to find its neighbours."""
    module = re.compile(r"python3? -m (bench(?:\.[a-z0-9_]+)+)")
    by_path = re.compile(r"python3? (bench/[a-z0-9_/]+\.py)")
    pages = [ROOT / "README.md", *DOCS.rglob("*.md")]
    pages += [path for path in (ROOT / "bench").rglob("*")
              if path.suffix in {".md", ".py", ".sh", ".yaml", ".json"} and path.is_file()]
    missing, by_file = set(), set()
    for page in pages:
        text = page.read_text()
        missing |= {(str(page.relative_to(ROOT)), name) for name in module.findall(text)
                    if not (ROOT / (name.replace(".", "/") + ".py")).is_file()
                    and not (ROOT / name.replace(".", "/") / "__main__.py").is_file()}
        by_file |= {(str(page.relative_to(ROOT)), name) for name in by_path.findall(text)
                    if name != "bench/gpu_check/carry.py"}
    assert not missing, f"`python -m` names a bench module that is not there (page, module): {sorted(missing)}"
    assert not by_file, f"bench scripts run by file path instead of `python -m bench...`: {sorted(by_file)}"
    editing = [str(path.relative_to(ROOT)) for path in (ROOT / "bench").rglob("*.py")
               if "results" not in path.parts and "sys.path.insert" in path.read_text()]
    assert not editing, f"bench scripts that edit sys.path: {editing}"


def test_benchmark_pages_embed_plots_from_bench_results():
    """docs/hooks.py serves bench/results/**/*.png at benchmarks/plots/; every plot a study page embeds is a result
    file, and the study pages whose results include plots embed them."""
    embedded = {}
    for page in sorted((DOCS / "benchmarks").glob("*.md")):
        embedded[page.name] = re.findall(r"!\[[^\]]*\]\(plots/([^)]+\.png)\)", page.read_text())
        for plot in embedded[page.name]:
            assert (ROOT / "bench" / "results" / plot).is_file(), f"docs/benchmarks/{page.name} embeds {plot}"
    # pages whose studies write tables only (gpu.md: the GPU check's rows; quickstart.md: its scores; ray.md: the
    # driver's cost); a study not run yet has no plot
    without_plots = {"index.md", "quantization.md", "speed.md", "evaluation-budget.md", "gpu.md", "quickstart.md",
                     "ray.md"}
    without_plots |= {page for page, plot in (("curves.md", "curves/curves.png"),
                                              ("transfer.md", "transfer/transfer_gains.png"))
                      if not (ROOT / "bench" / "results" / plot).is_file()}
    for name, plots in embedded.items():
        if name not in without_plots:
            assert plots, f"docs/benchmarks/{name} embeds no plot"


def test_estrainer_signature_names_the_types_it_takes():
    """The API reference shows ESTrainer's real argument types (TRL's: a model id or PreTrainedModel, reward
    callables or import paths, datasets, a LoraConfig), not `Any`."""
    import inspect

    from evotune.es_trainer import ESTrainer

    annotations = {name: str(parameter.annotation)
                   for name, parameter in inspect.signature(ESTrainer.__init__).parameters.items() if name != "self"}
    assert all(annotation not in ("Any", "Any | None", inspect.Parameter.empty) for annotation in annotations.values())
    assert "str" in annotations["model"] and "PreTrainedModel" in annotations["model"]
    assert "Callable" in annotations["reward_funcs"] and "Sequence" in annotations["reward_funcs"]
    assert "datasets.Dataset" in annotations["train_dataset"] == annotations["eval_dataset"]
    assert "PreTrainedTokenizerBase" in annotations["processing_class"]
    assert "LoraConfig" in annotations["peft_config"] and "ESCallback" in annotations["callbacks"]
