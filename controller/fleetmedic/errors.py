"""The one small error taxonomy. Adapters map third-party errors into these.

- ``TemporaryError``: worth retrying after ``delay`` seconds (API 409/429/5xx,
  SMTP relay down, SSH timeout).
- ``PermanentError``: retrying will not help (bad config, unknown node);
  ``ForbiddenError`` (401/403) and ``NotFoundError`` (404) are kinds of it.
- ``ConfigError``: the configuration is invalid; the message is one line.

The cluster kinds' own errors live here too, so the loop and the agent catch them without
importing a kind's adapter: ``Expired`` and ``TooManyRequests`` (the API server's 410 and
429), ``ForeignDrain`` and ``ForeignField`` (a Slurm node someone else drained, or whose
Extra holds something not ours), and ``Cancelled`` (the controller stops or lost its lead
mid-phase).
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


class Expired(TemporaryError):
    """A watch's resourceVersion is too old (HTTP 410 Gone): list again."""


class TooManyRequests(TemporaryError):
    """HTTP 429: try again later. From the Eviction API it means a PodDisruptionBudget
    allows no disruption now (or the server is shedding load)."""


class ForeignDrain(PermanentError):
    """The node carries a reason that is not ours: not touched."""


class ForeignField(PermanentError):
    """The node's Extra holds something not ours that we cannot keep beside our record."""


class Cancelled(TemporaryError):
    """The controller is stopping or lost its leadership: the phase was abandoned and will
    run again (its in-flight marker still says ``running``)."""


def one_line(value: Any, limit: int = 300) -> str:
    """``value`` (an exception or any object) as one line of at most ``limit`` characters:
    whitespace collapsed, the exception's type name when it says nothing."""
    text = " ".join(str(value).split())
    if not text and isinstance(value, BaseException):
        text = type(value).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"
