"""Settings files read and validated into one-line ConfigErrors, for every config of
fleetmedic: the controller's (model/config), the agent's and the node checks'.

Apart from model/config on purpose: importing that package builds the controller's
config sections, which a node's ``fleetmedic check`` (run on every verify, hundreds of
times in the test suite, and by the agent on every node) never reads.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import ValidationError

from fleetmedic.errors import ConfigError, one_line

T = TypeVar("T")


def read_yaml(path: Path, what: str = "config") -> Any:
    """A YAML file's data, or a one-line ConfigError naming ``what`` and the file: not
    found, unreadable, a directory, binary or not UTF-8, invalid YAML. Every config of
    fleetmedic (controller, agent, checks) is read through here."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{what} {path}: not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {path}: is a directory, not a file") from None
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot read: {exc.strerror or exc}") from None
    if b"\0" in raw:
        raise ConfigError(f"{what} {path}: a binary file, not YAML")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{what} {path}: not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start})"
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{what} {path}: {where}invalid YAML: {problem}") from None


def validate_dataclass(cls: type[T], data: Any, source: str) -> T:
    """Build one of the agent's or the checks' settings dataclasses from YAML data with
    pydantic, as the controller's config is built: wrong types, unknown keys (with "did
    you mean") and bad values are one ConfigError line naming the key. Each dataclass
    says ``__pydantic_config__ = ConfigDict(extra="forbid")``."""
    from pydantic import TypeAdapter

    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: must be a mapping at the top level")
    try:
        return TypeAdapter(cls).validate_python(dict(data))
    except ValidationError as exc:
        raise ConfigError(f"{source}: {first_error(exc, lambda loc: _keys_at(cls, loc))}") from None
    except ConfigError as exc:  # (a dataclass's own check, in its __post_init__)
        raise ConfigError(f"{source}: {exc}") from None


def _keys_at(cls: Any, loc: tuple[Any, ...]) -> list[str]:
    """The keys of the settings dataclass that holds ``loc``'s last part (for "did you
    mean": a typo is matched against its own section's keys only)."""
    import dataclasses
    import typing

    for part in loc[:-1]:
        hints = typing.get_type_hints(cls)
        if part not in hints or not dataclasses.is_dataclass(hints[part]):
            break
        cls = hints[part]
    return [f.name for f in dataclasses.fields(cls)]


_UNKNOWN_KEY = ("extra_forbidden", "unexpected_keyword_argument")  # (models, dataclasses)


def first_error(exc: ValidationError, keys: Callable[[tuple[Any, ...]], Iterable[str]]) -> str:
    """The first (or the likeliest) of a validation's errors as the one line every config
    of fleetmedic gives, ``keys(loc)`` being the key names beside ``loc`` (for "did you
    mean")."""
    # An unknown key is usually a typo that also causes a "required": report it first.
    errs = sorted(exc.errors(include_url=False), key=lambda e: e["type"] not in _UNKNOWN_KEY)
    first = errs[0]
    # a check across sections (a model validator of Config) names its fields itself
    loc = "".join(f"{p}." for p in first["loc"])[:-1]
    more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
    return one_line(f"{loc + ': ' if loc else ''}{_message(first, keys)}{more}", limit=1000)


def _message(err: Mapping[str, Any], keys: Callable[[tuple[Any, ...]], Iterable[str]]) -> str:
    kind, msg = err["type"], err["msg"]
    if kind == "value_error":
        return msg.removeprefix("Value error, ")
    if kind == "missing":
        return "required"
    if kind in _UNKNOWN_KEY:
        names = sorted(keys(tuple(err["loc"])))
        close = difflib.get_close_matches(str(err["loc"][-1]), names, n=1)
        return "unknown key" + (f" (did you mean {close[0]!r}?)" if close else "")
    shown = err.get("input")
    got = f", got {shown!r}" if isinstance(shown, (str, int, float, bool)) else ""
    return msg[:1].lower() + msg[1:] + got
