"""The pages' code blocks, run the way a user types them (tests/docs/test_pages.py).

Sybil's Markdown lexer finds every fenced block with a language; a comment on the line before a block says what it
is when it is not a command to run:

    <!-- file: data/my_prompts.jsonl -->      the block is that file's text: written, not run
    <!-- not run here: needs a CUDA GPU -->   the block cannot run on the CI machine, and why (counted and printed)
    <!-- run with: a ray start head -->       the block runs while a `ray start --head` of this machine is up, as
                                              the page has the user start one first

Every other `bash` block runs with bash in the page's own folder, stopping at the first command that fails; every
other `python` block runs in one namespace per page (a user's session), in that folder too. A page whose commands
use what other pages made (a run, a reward file) says so once, `<!-- docs-test: after PAGE, PAGE -->`, and those
pages run first in its folder. The only difference from a user's machine is one documented override:
$EVOTUNE_BUILTIN_MODEL points the built-in model at a tiny random model, so every command runs in seconds.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from sybil import Document
from sybil.parsers.markdown.lexers import FencedCodeBlockLexer

ROOT = Path(__file__).resolve().parents[2]
# README.md, the guides, and the pages they send a user to first
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "guides").glob("*.md")),
         *(ROOT / "docs" / name for name in ("getting-started.md", "tasks.md", "coming-from-trl.md"))]
MARKER = re.compile(r"<!--\s*(file|not run here|run with):\s*(.*?)\s*-->\s*$")
AFTER = re.compile(r"<!--\s*docs-test: after (.*?)\s*-->")
RUN = ("bash", "python")  # the languages whose blocks run; others must be files or marked


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    language: str
    source: str
    file: str | None = None  # <!-- file: PATH -->
    not_run: str | None = None  # <!-- not run here: WHY -->
    cluster: bool = False  # <!-- run with: a ray start head -->

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """Every fenced block with a language on `page`, with the marker on the line before it, if any."""
    document = Document.parse(str(page), FencedCodeBlockLexer(language=r"[\w+-]+"))
    found = []
    for example in document:
        region = example.region
        before = document.text[:region.start].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.search(before)
        kind, value = (marker.group(1), marker.group(2)) if marker else (None, None)
        found.append(Block(page, document.text[:region.start].count("\n") + 1, str(region.lexemes["language"]),
                           str(region.lexemes["source"]), value if kind == "file" else None,
                           value if kind == "not run here" else None, kind == "run with" and "ray start" in value))
    return found


def prerequisites(page: Path) -> list[Path]:
    """The pages whose runs and files `page` uses (`<!-- docs-test: after PAGE, ... -->`, paths from the checkout)."""
    found = AFTER.search(page.read_text())
    return [ROOT / name.strip() for name in found.group(1).split(",")] if found else []


def environment(tiny_model: str) -> dict[str, str]:
    """A user's shell, with the override that makes the built-in model a tiny one, and this Python's commands
    (`evotune`, `python`) first on PATH."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "PATH": path, "EVOTUNE_BUILTIN_MODEL": tiny_model, "PYTHONUNBUFFERED": "1"}


def prepare(folder: Path) -> None:
    """The page's folder: the checkout's examples/ and bench/ beside it, as the README's commands expect (they run
    in the checkout), and the one file a page presumes a user has: a copy of GSM8K's test split (its first 50
    problems, tests/data/). A guide's own files are written by its blocks."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("examples", "bench"):
        if not (folder / name).exists():
            (folder / name).symlink_to(ROOT / name)
    (folder / "gsm8k").mkdir(exist_ok=True)
    (folder / "gsm8k" / "test.jsonl").write_bytes((ROOT / "tests" / "data" / "gsm8k_test_first50.jsonl").read_bytes())


def run_block(block: Block, folder: Path, env: dict[str, str], namespace: dict, timeout: float = 600) -> None:
    """Write, run or skip one block; a failing command raises AssertionError naming the page, line and output."""
    if block.not_run is not None:
        return
    if block.file is not None:
        target = folder / block.file
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.source)
        return
    if block.language == "bash" and block.cluster:
        import secrets

        from bench.reliability.cluster import free_port, own_head, token_environment

        # the head's shell and the user's with one token (token authentication, as docs/ray-cluster.md says for Ray
        # 2.60), whatever ~/.ray/auth_token another head left on this machine
        shell = token_environment({key: value for key, value in env.items() if key != "RAY_ADDRESS"},
                                  secrets.token_hex(16))
        with own_head(shell, free_port(), num_cpus=2):
            run_block(Block(block.page, block.line, block.language, block.source), folder, shell, namespace, timeout)
        return
    if block.language == "bash":
        done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.source], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, (f"{block.where}: the block exited with {done.returncode}:\n{block.source}\n"
                                      f"--- stderr ---\n{done.stderr[-4000:]}\n--- stdout ---\n{done.stdout[-2000:]}")
        return
    if block.language == "python":
        previous = os.getcwd()
        os.chdir(folder)
        try:
            exec(compile(block.source, block.where, "exec"), namespace)  # noqa: S102 - the page's own code
        except Exception as error:  # noqa: BLE001 - reported with the block that raised it
            raise AssertionError(f"{block.where}: the block raised {type(error).__name__}: {error}\n"
                                 f"{block.source}") from error
        finally:
            os.chdir(previous)
        return
    raise AssertionError(f"{block.where}: a `{block.language}` block is neither a file (<!-- file: PATH -->) nor "
                         "marked <!-- not run here: WHY -->; only bash and python blocks run.")


def run_page(page: Path, folder: Path, tiny_model: str) -> tuple[int, list[Block]]:
    """Run every block of `page` in order in `folder`, after the pages it builds on: (blocks run or written, blocks
    not run here), of `page` alone."""
    for earlier in prerequisites(page):
        run_page(earlier, folder, tiny_model)
    prepare(folder)
    env, namespace, done, skipped = environment(tiny_model), {"__name__": "__main__"}, 0, []
    saved = {key: os.environ.get(key) for key in ("EVOTUNE_BUILTIN_MODEL",)}
    os.environ["EVOTUNE_BUILTIN_MODEL"] = tiny_model  # for the python blocks, which run in this process
    try:
        for block in blocks(page):
            if block.not_run is not None:
                skipped.append(block)
                continue
            run_block(block, folder, env, namespace)
            done += 1
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return done, skipped
