"""Durations in settings: seconds, or strings like ``90s``, ``10m``, ``1h30m``, ``7d``.

Apart from model/config for the node side's sake (see model/settings.py).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def parse_duration(value: Any) -> float:
    """Seconds from a number or a string like ``90s``, ``10m``, ``1h30m``, ``7d``."""
    if isinstance(value, bool):
        raise ValueError(f"must be a duration like 30s, 10m or 2h, got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        text = value.strip().replace(" ", "")
        if re.fullmatch(r"\d+(\.\d+)?", text):
            seconds = float(text)
        elif re.fullmatch(f"(?:{_DURATION.pattern})+", text):
            seconds = sum(float(n) * _UNITS[u] for n, u in _DURATION.findall(text))
        else:
            raise ValueError(f"must be a duration like 30s, 10m or 2h, got {value!r}")
    else:
        raise ValueError(f"must be a duration like 30s, 10m or 2h, got {value!r}")
    if seconds <= 0:
        raise ValueError(f"must be positive, got {value!r}")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]
