"""The grid of `evotune sweep`: `--grid key=v1,v2` parsed into points (values as YAML, brackets and quotes
checked), and each point's run directory: its readable `key=value,...` name where that names it alone, else a
capped readable prefix plus a hash of its values, so no two points ever share a directory."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError

# A point's directory is its `key=value,...` name when that text names it alone: lowercase plain values that
# --grid reads back as themselves (so no two points share it, even on a case-insensitive disk) in a short name.
# Any other point's is a readable prefix of at most READABLE_BYTES bytes plus a hash of its values.
READABLE_BYTES = 100
PLAIN = re.compile(r"[a-z0-9_.+-]+")
HASHED = re.compile(r"-[0-9a-f]{10}$")
NAME_BYTES = 255  # a file name's limit on common file systems

@dataclass(frozen=True, eq=False)
class GridPoint:
    values: tuple[tuple[str, Any], ...]  # ((key, value), ...) in --grid order; values may be lists or dicts

    @property
    def name(self) -> str:
        return ",".join(f"{key}={value}" for key, value in self.values)

    @property
    def identity(self) -> str:
        """The values as canonical JSON: `true` and `"True"`, `1` and `1.0`, `[a]` and `"['a']"` differ."""
        return json.dumps(dict(self.values), sort_keys=True, default=repr)

    @property
    def directory_name(self) -> str:
        """Its name where that is plain and short, else a capped readable name plus a hash of the values."""
        if all(PLAIN.fullmatch(key) and _reads_back(value) for key, value in self.values) \
                and len(self.name.encode()) <= READABLE_BYTES and not HASHED.search(self.name):
            return self.name
        digest = hashlib.sha256(self.identity.encode()).hexdigest()[:10]
        return f"{_cap(self.legacy_name, READABLE_BYTES)}-{digest}"

    @property
    def legacy_name(self) -> str:
        """The directory name evotune gave every point before hashed names: `/` as `_` (not unique)."""
        return self.name.replace("/", "_")

    # by identity, so a point whose value is a list or a dict (`parameters=[mlp]`, `task_args={...}`) is a dict key
    def __eq__(self, other: object) -> bool:
        return isinstance(other, GridPoint) and other.identity == self.identity

    def __hash__(self) -> int:
        return hash(self.identity)


def _reads_back(value: Any) -> bool:
    """Whether str(value) is plain text that --grid reads back as this very value, type included."""
    if isinstance(value, bool):
        return True  # True / False; the strings "True" / "False" are not plain (upper case)
    if not isinstance(value, (int, float, str)) or not PLAIN.fullmatch(str(value)):
        return False
    try:
        back = _scalar("", str(value))
    except ConfigError:
        return False
    return type(back) is type(value) and back == value


def _cap(text: str, limit: int) -> str:
    """At most `limit` UTF-8 bytes of `text`, never splitting a character."""
    return text.encode()[:limit].decode(errors="ignore")


def parse_grid(specs: list[str]) -> list[tuple[str, list[Any]]]:
    """`KEY=V1,V2,...` -> (key, [values]); values are YAML scalars (`2e-3` -> 0.002, `true`, `[q_proj]`)."""
    grid: list[tuple[str, list[Any]]] = []
    for spec in specs:
        key, sep, text = spec.partition("=")
        key = key.strip()
        if not sep or not key or not text.strip():
            raise ConfigError(f"--grid {spec!r}: write KEY=V1,V2,... e.g. --grid sigma=1e-3,2e-3.")
        if key in dict(grid):
            raise ConfigError(f"--grid names `{key}` twice; give all its values in one --grid {key}=V1,V2,...")
        parts = _split(spec, text)
        for number, part in enumerate(parts, start=1):
            if not part:
                raise ConfigError(f"--grid {spec!r}: value {number} is empty; write null for no value, and no "
                                  "comma at either end.")
        values = [_scalar(spec, part) for part in parts]
        if len(set(map(repr, values))) != len(values):
            raise ConfigError(f"--grid {spec!r} repeats a value.")
        grid.append((key, values))
    if not grid:
        raise ConfigError("evotune sweep needs at least one --grid KEY=V1,V2,...")
    return grid


def _split(spec: str, text: str) -> list[str]:
    """Split on commas outside brackets and quotes, so `[q_proj,v_proj]` and `"a,b"` stay one value."""
    parts, current, closing, quote, escaped = [], "", [], "", False
    for char in text:
        if quote:  # inside a quoted value: only its closing quote (not a backslash-escaped one) ends it
            quote = "" if char == quote and not escaped else quote
            escaped = quote == '"' and char == "\\" and not escaped
        elif char in "'\"" and (not current.strip() or current.rstrip()[-1] in "[{,:"):  # YAML opens quotes there
            quote = char
        elif char in "[{":
            closing.append("]" if char == "[" else "}")
        elif char in "]}" and (not closing or closing.pop() != char):
            raise ConfigError(f"--grid {spec!r}: `{char}` closes no open bracket. {BRACKETS_HINT}")
        elif char == "," and not closing:
            parts.append(current)
            current = ""
            continue
        current += char
    if quote:
        raise ConfigError(f"--grid {spec!r}: the quote {quote} is never closed; quote a value that holds a comma "
                          """whole, e.g. --grid 'stop="a,b",c'.""")
    if closing:
        raise ConfigError(f"--grid {spec!r}: a bracket is never closed (missing `{closing[-1]}`). {BRACKETS_HINT}")
    return [part.strip() for part in [*parts, current]]


BRACKETS_HINT = 'Write a list value as [a,b] and a mapping as {k: v}, e.g. --grid "parameters=[mlp],[self_attn]".'


def _scalar(spec: str, text: str) -> Any:
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        problem = str(getattr(exc, "problem", None) or exc).splitlines()[0]
        raise ConfigError(f"--grid {spec!r}: the value {text!r} is not valid YAML ({problem}); quote it whole, "
                          """e.g. 'key="a: b",c'.""") from exc
    # YAML 1.1 reads 2e-3 (no dot) as a string; a quoted '2e-3' is meant as one
    if isinstance(value, str) and text.strip()[:1] not in "'\"":
        try:
            return float(value) if any(c in value for c in "eE.") else value
        except ValueError:
            return value
    return value


def grid_points(grid: list[tuple[str, list[Any]]]) -> list[GridPoint]:
    keys = [key for key, _ in grid]
    return [GridPoint(tuple(zip(keys, combination))) for combination in itertools.product(*(v for _, v in grid))]


def point_directories(output: Path, points: list[GridPoint], configs: dict[GridPoint, dict[str, Any]]
                      ) -> dict[GridPoint, Path]:
    """Each point's directory: its own name, or the one an older evotune gave it (`/` as `_`) when that holds
    this point's runs (their config.yaml agrees with `configs[point]`) and no other point could own it."""
    legacy_names = [point.legacy_name for point in points]
    directories = {}
    for point in points:
        directory, legacy = output / point.directory_name, output / point.legacy_name
        if (legacy != directory and len(point.legacy_name.encode()) <= NAME_BYTES and not directory.exists()
                and legacy_names.count(point.legacy_name) == 1 and _holds_point(legacy, point, configs[point])):
            directory = legacy
        directories[point] = directory
    if len(set(directories.values())) < len(directories):  # two hashes agree: never seen, never silent
        raise ConfigError("two sweep points hash to one directory name; rename a value (e.g. reorder a list).")
    return directories


def _holds_point(directory: Path, point: GridPoint, config: dict[str, Any]) -> bool:
    """Whether every run config.yaml under `directory` has this point's values for its grid keys."""
    written = []
    for path in directory.glob("seed*/config.yaml"):
        try:
            written.append(yaml.safe_load(path.read_text()))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            return False
    return bool(written) and all(isinstance(values, dict) and all(values.get(key) == config[key] for key, _ in
                                                                  point.values) for values in written)


def run_directory(output: Path, point: GridPoint, seed: int) -> Path:
    """Where a new sweep puts this run (an old sweep's directory is found by point_directories)."""
    return output / point.directory_name / f"seed{seed}"
