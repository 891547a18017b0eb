"""The one small error taxonomy. Adapters map third-party errors into these.

- ``TemporaryError``: worth retrying after ``delay`` seconds (API 409/429/5xx,
  SMTP relay down, SSH timeout).
- ``PermanentError``: retrying will not help (bad config, unknown node);
  ``ForbiddenError`` (401/403) and ``NotFoundError`` (404) are kinds of it.
- ``ConfigError``: the configuration is invalid; the message is one line.
"""

from __future__ import annotations

from typing import Any


class FleetmedicError(Exception):
    """Base class. ``str(err)`` is always one line fit for an operator."""


class TemporaryError(FleetmedicError):
    def __init__(self, message: str, delay: float = 1.0) -> None:
        super().__init__(message)
        self.delay = delay


class PermanentError(FleetmedicError):
    pass


class ConfigError(PermanentError):
    pass


class ConflictError(TemporaryError):
    """The object changed under us (HTTP 409): re-read and retry."""


class ForbiddenError(PermanentError):
    """Not allowed (HTTP 401/403): RBAC does not grant it, so retrying will not help."""


class NotFoundError(PermanentError):
    """The object does not exist (HTTP 404), e.g. an unknown node name."""


def one_line(value: Any, limit: int = 300) -> str:
    """``value`` (an exception or any object) as one line of at most ``limit`` characters:
    whitespace collapsed, the exception's type name when it says nothing."""
    text = " ".join(str(value).split())
    if not text and isinstance(value, BaseException):
        text = type(value).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"
