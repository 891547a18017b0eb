"""The one command-line idiom every ``fleetmedic`` command uses (the kit, in one home).

- Exit codes: 0 ok; 1 the checked thing is unhealthy or has findings (``check``, ``diag``,
  ``scan``); 2 usage or config error (also click's own usage errors, and a refusal:
  401/403 is credentials or RBAC to set right); 3 could not reach a dependency (the
  API server, Loki); 4 the node carries our fence (``agent --once --exit-fenced``, for a
  Slurm prolog: a code of its own, because Python exits 1 on any crash, and a crash
  must never read as a fence). :func:`exit_code_of` maps the error
  taxonomy (fleetmedic/errors.py) onto them, so no command picks its own.
- Durations: :data:`DURATION` takes ``90s``, ``10m``, ``1h`` or plain seconds, through the
  parser the config files use (model/config/types.py), so a flag and a key read alike.
- ``--log-level``: :func:`log_level_option`, a checked choice, on every long-running
  command. ``--json``: :func:`json_option`, the one machine-output flag.
- Defaults: click's ``show_default`` (on in :data:`CONTEXT`, which every command inherits
  from the top-level group); an option whose default lives in a config file passes the
  effective default as ``show_default="60s"`` so it is shown the same way.
- Help: :func:`epilog` ends every command's help with examples and the exit codes.
- Node names: :data:`NODE` checks a Kubernetes name (RFC 1123 subdomain) before any
  request, so a typo or a shell metacharacter never reaches the API server.

tests/unit/cli/test_idiom.py walks the whole command tree and checks all of it.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from fleetmedic.backoff import Backoff
from fleetmedic.errors import (
    ConfigError,
    TemporaryError,
    one_line,
)

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_FENCED = 0, 1, 2, 3, 4
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "ok",
    EXIT_FINDINGS: "the checked thing is unhealthy or has findings (check, diag, scan)",
    EXIT_USAGE: "usage or config error",
    EXIT_UNREACHABLE: "could not reach a dependency (the API server, Loki)",
    EXIT_FENCED: "the node carries our fence (agent --once --exit-fenced)",
}
CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"], "show_default": True}
LOG_LEVELS = ("debug", "info", "warning", "error")


def exit_code_of(exc: BaseException) -> int:
    """The documented exit code for an error that ends a command."""
    if isinstance(exc, TemporaryError):
        return EXIT_UNREACHABLE
    return EXIT_USAGE  # (a refusal too, 401/403: credentials or RBAC to set right)


def fail(message: object, code: int = EXIT_USAGE, prog: str = "fleetmedic") -> NoReturn:
    """One line on stderr, then exit ``code``."""
    click.echo(f"{prog}: error: {one_line(message, 500)}", err=True)
    sys.exit(code)


def epilog(*examples: str, codes: tuple[int, ...] = (0, 2, 3)) -> str:
    """The end of a command's help: one or two examples, then its exit codes."""
    lines = ["\b", "Examples:", *(f"  {e}" for e in examples), "", "\b", "Exit status:"]
    lines += [f"  {c}  {EXIT_CODES[c]}" for c in codes]
    return "\n".join(lines)


# -- parameter types --------------------------------------------------------------------
class Duration(click.ParamType):
    """Seconds, from ``90s``, ``10m``, ``1h``, ``1h30m`` or a plain number (seconds)."""

    name = "duration"

    def __init__(self, minimum: float = 0.0) -> None:
        self.minimum = minimum

    def get_metavar(self, param: click.Parameter, *args: Any, **kwargs: Any) -> str:
        return "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None):
        if isinstance(value, float):
            seconds = value
        else:
            from fleetmedic.model.duration import parse_duration

            try:
                seconds = parse_duration(value)
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
        if seconds < self.minimum:
            self.fail(f"must be at least {self.minimum:g}s, got {value!r}", param, ctx)
        return seconds


DURATION = Duration()

# RFC 1123 subdomain, as the API server checks a Node's name (metadata.name).
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def check_node_name(name: str) -> str | None:
    """Why ``name`` cannot be a Kubernetes Node's name, or None."""
    if not name:
        return "is empty"
    if len(name) > 253:
        return f"is {len(name)} characters long (at most 253)"
    if not _SUBDOMAIN.fullmatch(name):
        return (
            f"{name[:60]!r} is not a Kubernetes name (lower-case letters, digits, '-' "
            "and '.', starting and ending with a letter or digit)"
        )
    return None


class NodeName(click.ParamType):
    name = "node"

    def get_metavar(self, param: click.Parameter, *args: Any, **kwargs: Any) -> str:
        return "NODE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None):
        why = check_node_name(str(value))
        if why:
            self.fail(why, param, ctx)
        return str(value)


NODE = NodeName()


# -- options ----------------------------------------------------------------------------
def log_level_option(fn: F) -> F:
    return click.option(
        "--log-level",
        type=click.Choice(LOG_LEVELS, case_sensitive=False),
        default="info",
        show_default=True,
        help="Log verbosity (one line per event, on stderr).",
    )(fn)


def json_option(help: str = "Print JSON instead of text.") -> Callable[[F], F]:
    return click.option("--json", "as_json", is_flag=True, help=help)


def require_kubeconfig(path: str | os.PathLike[str] | None, named_by: str) -> None:
    """A kubeconfig that was named must exist: "not found", and how it was named (the
    kubernetes client would say "Invalid kube-config file", naming the wrong cause)."""
    if path is None:
        env = os.environ.get("KUBECONFIG")
        if not env:
            return
        path, named_by = env.split(os.pathsep)[0], "KUBECONFIG"
    p = Path(path).expanduser()
    if not p.exists():
        raise ConfigError(
            f"kubeconfig {p} not found (named by {named_by}; pass --kubeconfig PATH "
            "or set KUBECONFIG)"
        )
    if p.is_dir():
        raise ConfigError(f"kubeconfig {p} is a directory (named by {named_by})")


def uncreatable(directory: Path) -> Path | None:
    """Why ``directory`` could not be made, checked without making it: the nearest existing
    ancestor when that is not a directory we may write, else None (it exists or could be
    made). ``config check``, ``run --dry-run`` and ``watch loki`` check this at start and
    create nothing, so a run that fails first leaves no directory behind."""
    up = directory
    while not up.exists() and up != up.parent:
        up = up.parent
    return None if up.is_dir() and os.access(up, os.W_OK | os.X_OK) else up


def audit_on_stderr() -> None:
    """Print the audit lines of a command's actions (controller/audit.py: one JSON line
    each, who/what/why) on stderr: a command run by hand has no daemon's logging, and
    without this its audit trail would go nowhere."""
    audit = logging.getLogger("fleetmedic.audit")
    if not audit.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        audit.addHandler(handler)
    audit.setLevel(logging.INFO)
    audit.propagate = False


def wait_reachable(
    probe: Callable[[], object],
    timeout: float | None,
    *,
    log: logging.Logger,
    stop: threading.Event | None = None,
    cap: float = 30.0,
    on_retry: Callable[[float], object] = lambda wait: None,
) -> None:
    """Call ``probe`` until it answers (returns). A TemporaryError (server unreachable,
    5xx) is retried with exponential back-off capped at ``cap`` seconds; any other error
    propagates at once.

    - ``timeout`` seconds (``--once``): then a TemporaryError naming the server, whose
      exit code is 3; no log line per retry.
    - ``timeout`` None (the daemons): retried until it answers or ``stop`` is set, with
      one log line when it is found down and one when it answers again (not one per
      retry: the state changes, not the attempts, are news).

    ``on_retry(wait)`` runs before each wait (a daemon tells systemd it is still starting).
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    backoff = Backoff(0.5, cap)
    stop = stop or threading.Event()
    while True:
        try:
            probe()
        except TemporaryError as exc:
            # one outage, whatever the message says each time: the first line is the news
            wait, news = backoff.failed("down")
            if deadline is not None:
                if time.monotonic() >= deadline:
                    raise TemporaryError(f"gave up after {timeout:g}s: {exc}") from None
                wait = min(wait, deadline - time.monotonic())
            elif news:
                log.warning("%s; retrying with back-off up to every %gs", exc, cap)
            on_retry(wait)
            if stop.wait(wait):
                return
            continue
        took = backoff.over()
        if took is not None and deadline is None:
            log.info("API server answers again after %.0fs", took)
        return
