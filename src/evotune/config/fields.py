"""The machinery of typed configs: a field with its help text, type checks read from the annotations, and
the round trip through plain dicts. `evotune.config` declares the keys; this module knows no key by name.

Every value is checked against its field's annotation (`float`, `int | None`, `list[str]`,
`dict[str, Any]`, a `Literal` of choices, ...) and coerced only where YAML makes that safe.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from dataclasses import field
from typing import Any, Literal, get_args, get_origin, get_type_hints

from ..errors import ConfigError


def option(default: Any, help: str, **kwargs: Any) -> Any:
    """A config key: its default and its help text, written once (`evotune keys`, each command's --help and
    docs/configs.md show it). Lists and dicts get a fresh copy per config."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help}, **kwargs)
    return field(default=default, metadata={"help": help}, **kwargs)


def same_as(config: type, key: str, default: Any = dataclasses.MISSING) -> Any:
    """The field `key` of `config` again (its help text written once), with another default if given."""
    declared = config.__dataclass_fields__[key]
    if default is dataclasses.MISSING:
        default = declared.default_factory() if declared.default is dataclasses.MISSING else declared.default
    return option(default, declared.metadata["help"])


# TRL's names for the keys a GRPO user reaches for first, named in the error when they are not this config's.
TRL_NAMES = {"max_steps": "iterations", "num_generations": "population_size",
             "max_completion_length": "max_new_tokens", "per_device_train_batch_size": "batch_size",
             "num_train_epochs": "iterations"}


class UnknownKeyError(ConfigError, TypeError):
    """An argument or config key the config does not have (a TypeError too, as Python's own for a bad argument)."""


def unknown_key_message(config: type, key: str, source: str) -> str:
    known = [f.name for f in dataclasses.fields(config)]
    if key in TRL_NAMES and TRL_NAMES[key] in known:
        hint = f"TRL's `{key}` is `{TRL_NAMES[key]}` here."
    else:
        lowered = {name.lower(): name for name in known}  # `SIGMA` is `sigma` mistyped, not an unknown word
        close = [lowered[match] for match in difflib.get_close_matches(key.lower(), list(lowered), n=1)]
        hint = f"did you mean `{close[0]}`?" if close else f"valid keys: {', '.join(known)}."
    kind = f"{config.KIND} " if getattr(config, "KIND", "") else ""
    return f"{source}: unknown {kind}key `{key}`; {hint}"


class _ConfigMeta(type):
    """Calling a config class with an unknown keyword names the closest key (and TRL's mapping) as the CLI does,
    instead of the dataclass's bare `unexpected keyword argument`."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if dataclasses.is_dataclass(cls):
            known = {f.name for f in dataclasses.fields(cls)}
            for key in kwargs:
                if key not in known:
                    raise UnknownKeyError(unknown_key_message(cls, key, f"{cls.__name__}(...)"))
            kwargs = cls.with_defaults(kwargs)
        return super().__call__(*args, **kwargs)


class ConfigMixin(metaclass=_ConfigMeta):
    """What every typed config shares: type checks from the annotations, dict round trip, help text, choices."""

    KIND = ""  # e.g. "SFT": named in unknown-key errors

    @classmethod
    def with_defaults(cls, values: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments a config is built from, with any defaults that depend on them (a run's method's:
        RunConfig) filled in; the fields' own defaults fill the rest."""
        return values

    def __post_init__(self) -> None:
        self.check_types()
        self.validate()

    def validate(self) -> None:
        """Checks between keys and of ranges; each config adds its own."""

    def check_types(self) -> None:
        """Every value against its annotation, coerced where that is safe (ints to floats, '2e-3' to 2e-3)."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for key, hint in self.field_types().items():
            example = defaults.get(key)
            setattr(self, key, check_value(key, getattr(self, key), hint,
                                           None if example is dataclasses.MISSING else example))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def field_types(cls) -> dict[str, Any]:
        hints = get_type_hints(cls)
        return {f.name: hints[f.name] for f in dataclasses.fields(cls)}

    @classmethod
    def help(cls) -> dict[str, str]:
        return {f.name: f.metadata["help"] for f in dataclasses.fields(cls)}

    @classmethod
    def choices(cls) -> dict[str, tuple]:
        """The allowed values of every key whose type is (optionally, or as list items) a Literal."""
        return {key: allowed for key, hint in cls.field_types().items() if (allowed := literal_choices(hint))}

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config"):
        """Unknown keys name the closest valid one; values are checked against the annotations."""
        known = [f.name for f in dataclasses.fields(cls)]
        for key in values:
            if key not in known:
                raise UnknownKeyError(unknown_key_message(cls, key, source))
        return cls(**values)


def literal_choices(hint: Any) -> tuple:
    """The Literal's values in `hint`, looking through `X | None` and `list[X]`; () when there is none."""
    if get_origin(hint) is Literal:
        return get_args(hint)
    if get_origin(hint) in (typing.Union, types.UnionType, list):
        return next((found for arg in get_args(hint) if (found := literal_choices(arg))), ())
    return ()


# bool is an int in Python, but `seed: true` is a mistake, not 1
SCALAR_CHECKS = {bool: lambda value: isinstance(value, bool),
                 int: lambda value: isinstance(value, int) and not isinstance(value, bool),
                 str: lambda value: isinstance(value, str)}


def _requirement(hint: Any, example: Any) -> str:
    """What a value of type `hint` must be, in words, for an error message."""
    example_text = f", e.g. {example!r}" if example is not None and not isinstance(example, bool) else ""
    if get_origin(hint) is Literal:
        return "set it to one of: " + ", ".join(map(str, get_args(hint)))
    if hint is bool:
        return "set it to true or false"
    if hint is int:
        return "it must be a whole number" + example_text
    if hint is float:
        return "it must be a number" + example_text
    if hint is str:
        return "it must be text (in YAML, quote a value that looks like a number)"
    if get_origin(hint) is list:
        return "it must be a list (YAML: [a, b]; [] for none)"
    if get_origin(hint) is dict:
        return "it must be a mapping (YAML: {name: value})"
    raise TypeError(f"config annotation {hint!r} has no check; add one to evotune.config.fields")


def check_value(key: str, value: Any, hint: Any, example: Any = None) -> Any:
    """`value` as type `hint`, or a ConfigError that names `key` and says what to set.

    Coercions kept from YAML use: an int where a float is expected becomes a float, and a string
    that spells a number (YAML 1.1 reads `2e-3`, without a dot, as a string) becomes that float.
    Floats must be finite: `.inf` and `.nan` are refused.
    """
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):  # configs use unions only as `X | None`
        if value is None and type(None) in args:
            return None
        (inner,) = [arg for arg in args if arg is not type(None)]
        return check_value(key, value, inner, example)
    fail = ConfigError(f"`{key}` is {'null' if value is None else repr(value)}; {_requirement(hint, example)}.")
    if origin is Literal:
        if isinstance(value, str) and value in args:
            return value
        close = difflib.get_close_matches(str(value), [str(arg) for arg in args], n=1)
        raise ConfigError(f"{fail} Did you mean {close[0]}?" if close else str(fail))
    if hint in SCALAR_CHECKS:
        if not SCALAR_CHECKS[hint](value):
            raise fail
        return value
    if hint is float:
        return _check_float(key, value, fail, example)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise fail
        return [check_value(f"{key}[{index}]", item, args[0]) for index, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise fail
        for name in value:
            if not isinstance(name, str):  # every config mapping is keyed by argument names
                raise ConfigError(f"`{key}` has the name {name!r}; names must be text, e.g. {{digits: 3}}.")
        return {name: check_value(f"{key}.{name}", item, args[1]) for name, item in value.items()}
    raise TypeError(f"config annotation {hint!r} of `{key}` has no check; add one to evotune.config.fields")


def _check_float(key: str, value: Any, fail: ConfigError, example: Any) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise fail from None
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise fail
    value = float(value)
    if not math.isfinite(value):  # `.inf` / `.nan` in YAML, or 1e999
        raise ConfigError(f"`{key}` is {value}; it must be a finite number" +
                          (f", e.g. {example!r}." if example is not None else "."))
    return value
