# Copyright: fleetmedic developers
# Apache License 2.0 (see galaxy.yml)
"""Text helpers shared by the collection's plugins (standard library only)."""

from __future__ import annotations


def one_line(value, limit=300):
    """``value`` (an exception or any object) as one line of at most ``limit`` characters:
    whitespace collapsed, the exception's type name when it says nothing."""
    text = " ".join(str(value).split())
    if not text and isinstance(value, BaseException):
        text = type(value).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"
