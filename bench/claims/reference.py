"""Spans rendered from the code rather than from a result file, kept in the pages so they read on GitHub too (the
docs hooks render the site's copies): every config key of each command, grouped as its config class groups them, and
the keys a `--resume` may change."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable

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


def cli_overview() -> str:
    """`evotune --help` as the parser prints it at a fixed width: the commands, in a text block."""
    import os

    from evotune.cli.main import build_parser

    width = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "110"  # argparse wraps at the terminal's width: fix it so the page does not vary
    try:
        text = build_parser().format_help().rstrip()
    finally:
        if width is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = width
    return "\n\n```text\n" + text + "\n```\n\n"


def resumable_keys(command: str) -> str:
    """The keys `evotune COMMAND --resume` may change with --set (runs.directory.RESUMABLE_KEYS, those its config
    has), as code spans."""
    from evotune.baselines.grpo import GRPORunConfig
    from evotune.config import TrainConfig
    from evotune.runs.directory import RESUMABLE_KEYS

    fields = (TrainConfig if command == "train" else GRPORunConfig).__dataclass_fields__
    return ", ".join(f"`{key}`" for key in RESUMABLE_KEYS if key in fields)


def cli_commands() -> str:
    """Every command's arguments and options, one row a command, from the parsers: the whole command line reads on
    GitHub too, where the site's full `--help` of each (docs/hooks.py) is not rendered."""
    import argparse

    from evotune.cli.main import build_parser

    (commands,) = [action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)]
    lines = ["| command | arguments | options |", "|---|---|---|"]
    for name, command in commands.choices.items():
        positional = [action.metavar or action.dest for action in command._actions if not action.option_strings]
        options = [max(action.option_strings, key=len) for action in command._actions
                   if action.option_strings and action.dest != "help"]
        lines.append(f"| `evotune {name}` | {', '.join(f'`{argument}`' for argument in positional) or '-'} | "
                     f"{', '.join(f'`{option}`' for option in options)} |")
    return "\n\n" + "\n".join(lines) + "\n\n"


CLAIMS: dict[str, Callable[[], str]] = {
    "cli-overview": cli_overview,
    "cli-commands": cli_commands,
    **{f"keys-{which}": (lambda which=which: "\n\n" + grouped_keys(which)) for which in ("train", "sft", "grpo")},
    "resumable-keys-train": lambda: resumable_keys("train"),
    "resumable-keys-grpo": lambda: resumable_keys("grpo"),
}
