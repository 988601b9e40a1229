"""MkDocs hooks: pages whose content comes from the code, so the site cannot drift from it.

- `<!-- evotune-keys train -->` (or `sft`, `grpo`) becomes a table of that command's config keys, made
  from the output of `evotune keys [COMMAND]` itself.
- `<!-- import-graph -->` becomes the package-level import graph of `src/evotune` (a mermaid diagram and
  the same edges as a table), read from the source with `ast`.
- `<!-- bench-results -->` becomes `bench/results/README.md`, the tables `python bench/report.py` writes
  from the result JSON files (headings moved one level down).
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


def bench_results() -> str:
    text = (ROOT / "bench" / "results" / "README.md").read_text()
    lines = text.splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return "\n".join("#" + line if line.startswith("#") else line for line in lines)


def on_page_markdown(markdown: str, page, config, files) -> str:
    markdown = KEYS_MARKER.sub(lambda match: keys_table(match.group(1)), markdown)
    if "<!-- import-graph -->" in markdown:
        markdown = markdown.replace("<!-- import-graph -->", import_graph())
    if "<!-- bench-results -->" in markdown:
        markdown = markdown.replace("<!-- bench-results -->", bench_results())
    return markdown

