"""Small value types and the section base used by the controller config.

Each validator's message is written to read well after ``section.field:``,
e.g. ``smtp.port: must be 1..65535, got 0``.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import os
import re
import textwrap
from collections.abc import Mapping
from datetime import datetime, time, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationInfo,
    field_validator,
)

from fleetmedic.errors import ConfigError
from fleetmedic.model.duration import Duration as Duration  # (re-exported)
from fleetmedic.model.duration import parse_duration as parse_duration  # (re-exported)

Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
DAYS: tuple[Weekday, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


def _port(v: int) -> int:
    if not 1 <= v <= 65535:
        raise ValueError(f"must be 1..65535, got {v}")
    return v


def _percent(v: float) -> float:
    if not 0 <= v <= 100:
        raise ValueError(f"must be 0..100, got {v:g}")
    return v


def _quantity(v: Any) -> int | str:
    """A count (``3``) or a share of the pool (``"50%"``)."""
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return v
    if isinstance(v, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*%\s*", v)
        if m and float(m.group(1)) <= 100:
            return f"{float(m.group(1)):g}%"
        if v.strip().isdigit():
            return int(v)
    raise ValueError(f'must be a count (e.g. 3) or a percentage (e.g. "50%"), got {v!r}')


def _taint_key(v: str) -> str:
    # A qualified name: optional DNS prefix "/" then a name (as Kubernetes validates keys).
    name = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
    prefix = r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?"
    if not re.fullmatch(f"({prefix}/)?{name}", v):
        raise ValueError(f"must be a valid taint key like example.com/name, got {v!r}")
    return v


def _label_value(v: str) -> str:
    if v and not re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", v):
        raise ValueError(f"must be a valid label value (<=63 of A-Za-z0-9._-), got {v!r}")
    return v


class Section(BaseModel):
    """Base of every config section: unknown keys are errors (typos must not pass
    silently) and values are immutable. Each field's docstring says why its default is
    what it is (:func:`field_docs` reads them).

    The validators are built on first use (``defer_build``), so a process that never
    validates a config (``--help``, the node's checks without one) does not pay for
    them."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)


def field_docs(model: type[BaseModel]) -> dict[str, str]:
    """Each field's attribute docstring (the string right under it in the class body),
    the model's bases' included, read from the source when asked.

    pydantic's ``use_attribute_docstrings`` would do the same at import for every model,
    in every process: 0.27 s of each start-up (profiled), for text only docs and tests read.
    """
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not issubclass(cls, BaseModel) or cls is BaseModel:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError):  # no source (e.g. a built wheel without .py files)
            continue
        body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
        for stmt, after in itertools.pairwise(body):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[stmt.target.id] = inspect.cleandoc(after.value.value)
    return docs


def _resolve(p: Path, info: ValidationInfo) -> Path:
    base = (info.context or {}).get("base")
    return p if p.is_absolute() or base is None else Path(base) / p


ConfigPath = Annotated[Path, AfterValidator(_resolve)]


def _email(v: str) -> str:
    if not re.fullmatch(r"[^@\s<>,]+@[^@\s<>,]+", v):
        raise ValueError(f"must be an email address like oncall@example.com, got {v!r}")
    return v


Email = Annotated[str, AfterValidator(_email)]
Port = Annotated[int, AfterValidator(_port)]
Percent = Annotated[float, AfterValidator(_percent)]
Quantity = Annotated[int | str, BeforeValidator(_quantity)]
TaintKey = Annotated[str, AfterValidator(_taint_key)]
LabelValue = Annotated[str, AfterValidator(_label_value)]


def quantity_of(value: int | str, pool: int, *, round_up: bool) -> int:
    """Resolve a Quantity against a pool size."""
    if isinstance(value, int):
        return value
    share = float(value.rstrip("%")) * pool / 100
    whole = int(share)
    return whole + 1 if round_up and share > whole else whole


class Window(BaseModel):
    """A weekly window, e.g. ``{days: [sat, sun], start: "02:00", end: "06:00"}``.

    ``end`` before ``start`` runs past midnight; ``days`` name the day it starts.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    days: tuple[Weekday, ...] = DAYS
    start: time
    end: time
    timezone: str = "UTC"

    @field_validator("timezone")
    @classmethod
    def _zone(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {v!r}") from None
        return v

    def contains(self, when: datetime) -> bool:
        local = when.astimezone(ZoneInfo(self.timezone))
        now = local.time().replace(tzinfo=None)
        if self.start <= self.end:
            return DAYS[local.weekday()] in self.days and self.start <= now < self.end
        if now >= self.start:
            return DAYS[local.weekday()] in self.days
        yesterday = local - timedelta(days=1)
        return now < self.end and DAYS[yesterday.weekday()] in self.days


def credential_path(name: str, environ: Mapping[str, str] = os.environ) -> Path:
    """``$CREDENTIALS_DIRECTORY/name`` (systemd LoadCredential=)."""
    directory = environ.get("CREDENTIALS_DIRECTORY")
    if not directory:
        raise ConfigError(
            f"credential {name!r} named but $CREDENTIALS_DIRECTORY is not set "
            "(LoadCredential= in the unit provides it)"
        )
    return Path(directory) / name
