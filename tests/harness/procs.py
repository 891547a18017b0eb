"""Small process helpers shared by the Go-built test servers (Loki, Receptor).

- :func:`spawn` starts a server in its own session, output appended to a log file, and
  arranges that the kernel SIGKILLs it when the process that started it dies (even by
  SIGKILL), so a killed test run leaves no server behind.
- :func:`stop` ends one such process (SIGTERM to its group, SIGKILL after a timeout).
- :func:`built_dir` finds what ``scripts/setup.d`` built (or a developer's own build
  named in the environment, refused under ``CI=true``) and reads its ``VERSIONS``.
- :func:`free_port`, :func:`last_line`, :func:`rss` and :func:`cache_key`.

A cache key here is the one ``scripts/setup.d/NN-*.sh`` computes with
``sha256sum FILES | sha256sum | cut -c1-12`` in the pin directory.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import signal
import socket
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = Path(os.environ.get("FLEETMEDIC_CACHE_DIR", "/var/cache/fleetmedic"))


def cache_key(src: Path, files: Sequence[str]) -> str:
    """sha256 over ``files`` in ``src``, as ``sha256sum FILES | sha256sum`` in setup."""
    lines = "".join(f"{hashlib.sha256((src / f).read_bytes()).hexdigest()}  {f}\n" for f in files)
    return hashlib.sha256(lines.encode()).hexdigest()[:12]


# Switches that put something else in place of a real part the suite tests against: a
# developer's own build of a test server, or the Receptor with our fixes applied where the
# stock one is what operators run. Fine on a desk; CI must test the parts setup builds.
REPLACING_SWITCHES = (
    "FLEETMEDIC_KUBE_BIN",
    "FLEETMEDIC_KUBELET_BIN",
    "FLEETMEDIC_LOKI_BIN",
    "FLEETMEDIC_RECEPTOR_BIN",
    "FLEETMEDIC_RECEPTOR_PATCHED",
)


class ReplacedUnderCI(RuntimeError):
    """A switch of REPLACING_SWITCHES is set while ``CI=true``."""


def replacing_switches(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The REPLACING_SWITCHES set (non-empty, and not "0" for the patched Receptor)."""
    return [k for k in REPLACING_SWITCHES if environ.get(k, "") not in ("", "0")]


def refuse_under_ci(environ: Mapping[str, str] = os.environ) -> None:
    """ReplacedUnderCI naming the switches when ``CI=true`` and any is set."""
    switches = replacing_switches(environ)
    if environ.get("CI") == "true" and switches:
        raise ReplacedUnderCI(
            f"refused under CI=true: {', '.join(switches)} (they replace a real part the "
            "suite tests against; CI tests what scripts/setup.sh builds: unset them)"
        )


def read_versions(d: Path) -> dict[str, str]:
    """``d/VERSIONS`` (``NAME VERSION`` a line, as setup writes it) as a dict; {} if absent."""
    versions = {}
    if (d / "VERSIONS").exists():
        for line in (d / "VERSIONS").read_text().splitlines():
            name, _, ver = line.partition(" ")
            versions[name] = ver
    return versions


def built_dir(
    override: str, name: str, files: Sequence[str], error: type[Exception], hint: str
) -> Path:
    """The directory setup built into, ``CACHE_DIR/name`` (``$override`` instead when set:
    a developer's own build, refused under ``CI=true``), holding every one of ``files``;
    else ``error`` naming what is missing and ``hint``, the command that builds it."""
    if os.environ.get(override):
        try:
            refuse_under_ci({"CI": os.environ.get("CI", ""), override: os.environ[override]})
        except ReplacedUnderCI as e:
            raise error(str(e)) from None
        d = Path(os.environ[override])
    else:
        d = CACHE_DIR / name
    missing = [f for f in files if not (d / f).exists()]
    if missing:
        raise error(f"{', '.join(missing)} not built (missing in {d}); run: {hint}")
    return d


def pinned(gomod: Path, module: str) -> str | None:
    """The version ``module`` is required at in ``gomod`` (None if it is not)."""
    for line in gomod.read_text().splitlines():
        parts = line.split()
        if parts[:1] == ["require"]:
            parts = parts[1:]
        if len(parts) >= 2 and parts[0] == module and parts[1].startswith("v"):
            return parts[1]
    return None


def die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the thread that started it dies."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn(
    argv: Sequence[str],
    log: Path,
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen:
    """Start ``argv`` with stdout and stderr appended to ``log``."""
    out = open(log, "ab")
    try:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            preexec_fn=die_with_parent,
        )
    finally:
        out.close()


def stop(proc: subprocess.Popen | None, timeout: float = 15.0, sig: int = signal.SIGTERM) -> None:
    """Send ``sig`` to the process group, SIGKILL it after ``timeout``, reap it."""
    if proc is None:
        return
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    try:  # anything left in its group (there should be none)
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def last_line(log: Path, containing: str = "") -> str:
    """The last non-empty line of ``log`` (with ``containing``, the last such line)."""
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    if containing:
        lines = [ln for ln in lines if containing in ln] or lines
    return lines[-1][:300] if lines else ""


def rss(pid: int) -> int:
    """Resident memory of ``pid`` in bytes (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@contextmanager
def exclusive(root: Path, name: str) -> Iterator[None]:
    """Hold the lock file ``root``'s parent/``name`` (creating ``root``): one harness part's
    bring-up and sweep of stale leftovers at a time, across test workers."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root.parent / name, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
