"""MkDocs hooks: pages whose content comes from the code, so the site cannot drift from it.

- `<!-- import-graph -->` becomes the package-level import graph of `src/evotune` (a mermaid diagram and
  the same edges as a table), read from the source with `ast`.
- `<!-- evotune-cli -->` becomes the `--help` of each `evotune` command, from the parsers themselves (a section
  per command).
- `<!-- claim:NAME -->...<!-- /claim -->` spans are rendered anew from `bench/results/` (`bench/claims/`).
- `<!-- bench-results -->` becomes `bench/results/README.md`, the tables `python -m bench.report` writes
  from the result JSON files (headings moved one level down).
- Every plot under `bench/results/` is served at `benchmarks/plots/<its path under bench/results>`, so a page in
  `docs/benchmarks/` embeds `![...](plots/drift/drift_arithmetic.png)` straight from the result files (no copies to
  go stale; a plot that is gone fails `mkdocs build --strict` as a broken link).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src" / "evotune"
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

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
    sections = []  # `evotune --help` itself is a claim on the page (bench/claims/reference.py), read on GitHub too
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
    if "<!-- import-graph -->" in markdown:
        markdown = markdown.replace("<!-- import-graph -->", import_graph())
    if "<!-- evotune-cli -->" in markdown:
        markdown = markdown.replace("<!-- evotune-cli -->", cli_reference())
    if "<!-- bench-results -->" in markdown:
        markdown = markdown.replace("<!-- bench-results -->", bench_results())
    return markdown

