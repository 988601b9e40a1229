"""MkDocs hooks: pages whose content comes from the code, so the site cannot drift from it.

- `<!-- evotune-keys train -->` (or `sft`, `grpo`) becomes a table of that command's config keys, made
  from the output of `evotune keys [COMMAND]` itself.
- `<!-- evotune-keys-grouped train -->` becomes the same keys in one table per section of the config class (the
  `# comment` above each group of fields), each key with an anchor `#train-KEY`.
- `<!-- import-graph -->` becomes the package-level import graph of `src/evotune` (a mermaid diagram and
  the same edges as a table), read from the source with `ast`.
- `<!-- evotune-cli -->` becomes the `--help` of `evotune` and of each of its commands, from the parsers
  themselves (a section per command).
- `<!-- claim:NAME -->...<!-- /claim -->` spans are rendered anew from `bench/results/` (`bench/claims/`).
- `<!-- bench-results -->` becomes `bench/results/README.md`, the tables `python -m bench.report` writes
  from the result JSON files (headings moved one level down).
- Every plot under `bench/results/` is served at `benchmarks/plots/<its path under bench/results>`, so a page in
  `docs/benchmarks/` embeds `![...](plots/drift/drift_arithmetic.png)` straight from the result files (no copies to
  go stale; a plot that is gone fails `mkdocs build --strict` as a broken link).
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src" / "evotune"
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

KEYS_MARKER = re.compile(r"<!-- evotune-keys (train|sft|grpo) -->")
GROUPED_KEYS_MARKER = re.compile(r"<!-- evotune-keys-grouped (train|sft|grpo) -->")
# one line of `evotune keys`: "key (default REPR[; [each ]one of: a, b]): help"
KEY_LINE = re.compile(r"^(?P<key>\w+) \(default (?P<default>.*?)(?:; (?P<each>each )?one of: (?P<choices>[^)]*))?\): "
                      r"(?P<help>.*)$")


def evotune_keys(which: str) -> list[dict[str, str]]:
    """The rows `evotune keys WHICH` prints, parsed: key, default, choices, each (list of choices), help."""
    from evotune.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["keys", which])
    if status:
        raise RuntimeError(f"`evotune keys {which}` exited with {status}")
    rows = []
    for line in out.getvalue().splitlines():
        match = KEY_LINE.match(line)
        if not match:
            raise RuntimeError(f"docs/hooks.py cannot parse this line of `evotune keys {which}`: {line!r}")
        rows.append({k: v or "" for k, v in match.groupdict().items()})
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _code(text: str) -> str:
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def keys_table(which: str) -> str:
    lines = ["| key | default | choices | meaning |", "|---|---|---|---|"]
    for row in evotune_keys(which):
        choices = ", ".join(_code(c.strip()) for c in row["choices"].split(",")) if row["choices"] else ""
        if choices and row["each"]:
            choices = "each of " + choices
        lines.append(f"| `{row['key']}` | {_cell(_code(row['default']))} | {_cell(choices)} | {_cell(row['help'])} |")
    return "\n".join(lines)


def field_sections(which: str) -> dict[str, str]:
    """{field: its section}: the `# comment` line above the field in its class's source (the classes group their
    fields so), else "the run" for the keys every command shares (RunConfig)."""
    import inspect

    from evotune.baselines.grpo import GRPORunConfig
    from evotune.config import TrainConfig
    from evotune.sft import SFTConfig

    config_class = {"train": TrainConfig, "sft": SFTConfig, "grpo": GRPORunConfig}[which]
    sections: dict[str, str] = {}
    for klass in reversed(config_class.__mro__):
        if "__dataclass_fields__" not in vars(klass):
            continue
        section = "the model, its data and the run"
        for line in inspect.getsource(klass).splitlines():
            stripped = line.strip()
            if line.startswith("    # ") and not line.startswith("     "):
                section = stripped[2:]
            elif match := re.match(r"^    (\w+): ", line):
                sections.setdefault(match.group(1), section)
    return sections


def grouped_keys(which: str) -> str:
    """The keys of `evotune keys WHICH` in one table per section, each key with its own anchor (#key-NAME)."""
    sections = field_sections(which)
    groups: dict[str, list[dict[str, str]]] = {}
    for row in evotune_keys(which):
        groups.setdefault(sections.get(row["key"], "other"), []).append(row)
    out = []
    for section, rows in groups.items():
        out += [f"### {section[0].upper() + section[1:]}", "", "| key | default | choices | meaning |",
                "|---|---|---|---|"]
        for row in rows:
            choices = ", ".join(_code(c.strip()) for c in row["choices"].split(",")) if row["choices"] else ""
            if choices and row["each"]:
                choices = "each of " + choices
            anchor = f'<a id="{which}-{row["key"]}"></a>'
            out.append(f"| {anchor}`{row['key']}` | {_cell(_code(row['default']))} | {_cell(choices)} "
                       f"| {_cell(row['help'])} |")
        out.append("")
    return "\n".join(out)


def _unit(module: str) -> str:
    """The package-level unit of a module: evotune.spaces.full -> spaces, evotune.trainer -> trainer."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "evotune"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_edges() -> dict[str, dict[str, set[str]]]:
    """{unit: {"top": units imported at module level, "lazy": units imported only inside functions}}."""
    edges: dict[str, dict[str, set[str]]] = {}
    for path in sorted(SOURCE.rglob("*.py")):
        name = _module_name(path)
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        tree = ast.parse(path.read_text())
        top_level = {id(node) for node in tree.body}
        for statement in tree.body:  # `if TYPE_CHECKING:` / try blocks at module level count as module level
            if isinstance(statement, (ast.If, ast.Try)):
                top_level |= {id(node) for node in ast.walk(statement)}
        unit = _unit(name)
        entry = edges.setdefault(unit, {"top": set(), "lazy": set()})
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                targets = [module] if node.module or not node.level else [f"{module}.{a.name}" for a in node.names]
            for target in targets:
                if target.split(".")[0] != "evotune" or target == "evotune":
                    continue
                other = _unit(target)
                if other != unit:
                    entry["top" if id(node) in top_level else "lazy"].add(other)
    for entry in edges.values():
        entry["lazy"] -= entry["top"]
    return edges


# the diagram shows the layers and the modules that compose them, module-level imports only (errors.py,
# which every layer imports, is left out); the table below it lists every module and every import
DIAGRAM_UNITS = ("cli", "es_trainer", "trainer", "callbacks", "builders", "distributed", "backends", "tasks",
                 "spaces", "strategies", "optimizers", "seeds", "types", "config")


def import_graph() -> str:
    edges = import_edges()
    units = sorted(u for u in edges if u != "evotune")
    mermaid = ["```mermaid", "graph TD"]
    for unit in (u for u in DIAGRAM_UNITS if u in edges):
        mermaid += [f"    {unit} --> {target}" for target in sorted(edges[unit]["top"]) if target in DIAGRAM_UNITS]
    mermaid.append("```")
    table = ["| module or package | imports at module level | imports inside functions (lazily) |", "|---|---|---|"]
    for unit in units:
        kind = "package" if (SOURCE / unit).is_dir() else "module"
        name = f"`evotune/{unit}/`" if kind == "package" else f"`evotune/{unit}.py`"
        table.append(f"| {name} | {', '.join(sorted(edges[unit]['top'])) or '-'} "
                     f"| {', '.join(sorted(edges[unit]['lazy'])) or '-'} |")
    return "\n".join(mermaid + [""] + table)


def cli_reference() -> str:
    """`evotune --help` and each command's `--help`, as the parsers print them at a fixed width."""
    import argparse
    import os

    from evotune.cli.main import build_parser

    os.environ["COLUMNS"] = "110"  # argparse wraps at the terminal's width: fix it so the page does not vary
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    sections = ["## evotune", "", "```text", parser.format_help().rstrip(), "```"]
    for name, command in commands.choices.items():
        sections += ["", f"## evotune {name}", "", "```text", command.format_help().rstrip(), "```"]
    return "\n".join(sections)


def bench_results() -> str:
    text = (ROOT / "bench" / "results" / "README.md").read_text()
    lines = text.splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return "\n".join("#" + line if line.startswith("#") else line for line in lines)


def quoted_claims(markdown: str) -> str:
    """Each `<!-- claim:NAME -->...<!-- /claim -->` span rendered from bench/results (bench/claims/)."""
    if str(ROOT) not in sys.path:  # bench/ is the repository's own package, not an installed one
        sys.path.insert(0, str(ROOT))
    from bench import claims

    return claims.substitute(markdown)


RESULTS = ROOT / "bench" / "results"
PLOTS_URI = "benchmarks/plots"


def on_files(files, config):
    """Add bench/results/**/*.png to the site as benchmarks/plots/..., read in place from bench/results."""
    from mkdocs.structure.files import File

    for path in sorted(RESULTS.rglob("*.png")):
        uri = f"{PLOTS_URI}/{path.relative_to(RESULTS).as_posix()}"
        if files.get_file_from_path(uri) is None:
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    if "<!-- claim:" in markdown:
        markdown = quoted_claims(markdown)
    markdown = KEYS_MARKER.sub(lambda match: keys_table(match.group(1)), markdown)
    markdown = GROUPED_KEYS_MARKER.sub(lambda match: grouped_keys(match.group(1)), markdown)
    if "<!-- import-graph -->" in markdown:
        markdown = markdown.replace("<!-- import-graph -->", import_graph())
    if "<!-- evotune-cli -->" in markdown:
        markdown = markdown.replace("<!-- evotune-cli -->", cli_reference())
    if "<!-- bench-results -->" in markdown:
        markdown = markdown.replace("<!-- bench-results -->", bench_results())
    return markdown

