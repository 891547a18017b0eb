"""Run a command with a hard deadline, and get whatever it printed before it.

Every probe that can hang (an NVML call into a wedged driver, ``amd-smi``,
``rocminfo``, ``iperf3``) runs in a child process, because a Python thread
stuck in a C call can never be stopped. At the deadline the child's whole
process group gets SIGKILL (a shell wrapper's ``sleep`` must die too, or it
would hold the pipe open), and the caller still gets the output produced so
far, which tells it which call hung.

A process blocked in the kernel (``D`` state, a real hazard with a sick GPU)
does not die on SIGKILL until the kernel call returns. We do not wait for it:
it is *abandoned* and remembered under its ``key``; while it lives, the next
run with the same key returns at once instead of piling up another stuck
process every check interval.
"""

from __future__ import annotations

import dataclasses
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence

KILL_GRACE = 1.0  # seconds to wait for EOF/exit after SIGKILL
MAX_OUTPUT = 8 << 20  # bytes kept per stream; a runaway tool cannot eat the agent

_stuck: dict[str, subprocess.Popen] = {}
_stuck_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int | None  # None: killed at the deadline, or never started
    stdout: str
    stderr: str
    elapsed: float
    timed_out: bool = False
    error: str | None = None  # could not start, or refused because a previous run is stuck
    abandoned: bool = False  # did not exit even after SIGKILL (D state)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.error is None

    def describe(self) -> str:
        """One line saying how the run ended, for summaries."""
        cmd = " ".join(self.argv[:3])
        if self.error:
            return f"{cmd}: {self.error}"
        if self.timed_out:
            tail = "; still stuck after SIGKILL" if self.abandoned else ""
            return f"{cmd}: no answer within {self.elapsed:.1f}s, killed{tail}"
        last = (self.stderr.strip().splitlines() or self.stdout.strip().splitlines() or [""])[-1]
        return f"{cmd}: exit {self.returncode}" + (f": {last[:200]}" if last else "")


def stuck(key: str) -> int | None:
    """pid of a still-living abandoned process registered under ``key``, else None."""
    with _stuck_lock:
        proc = _stuck.get(key)
        if proc is None:
            return None
        if proc.poll() is None:
            return proc.pid
        del _stuck[key]
        return None


def run_bounded(
    argv: Sequence[str],
    timeout: float,
    *,
    env: Mapping[str, str] | None = None,
    key: str | None = None,
    max_output: int = MAX_OUTPUT,
) -> Completed:
    """Run ``argv`` for at most ``timeout`` seconds; never raises for the child's sake."""
    argv = tuple(str(a) for a in argv)
    start = time.monotonic()
    if key is not None:
        pid = stuck(key)
        if pid is not None:
            return Completed(
                argv,
                None,
                "",
                "",
                0.0,
                timed_out=True,
                error=f"previous run (pid {pid}) is still stuck after SIGKILL",
            )
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=dict(env) if env is not None else None,
        )
    except OSError as exc:
        return Completed(
            argv, None, "", "", time.monotonic() - start, error=f"cannot run: {exc.strerror or exc}"
        )

    assert proc.stdout is not None and proc.stderr is not None  # both are PIPEs
    out = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    deadline = start + max(timeout, 0.0)
    timed_out = not _pump(proc, out, deadline, max_output)
    if not timed_out:
        timed_out = not _wait_exit(proc, deadline)
    abandoned = False
    _kill_group(proc.pid)  # leftovers of a normal exit, or the whole tree at the deadline
    if timed_out:
        _pump(proc, out, time.monotonic() + KILL_GRACE, max_output)
        abandoned = not _wait_exit(proc, time.monotonic() + KILL_GRACE)
    for stream in out:
        stream.close()
    if abandoned:
        if key is not None:
            with _stuck_lock:
                _stuck[key] = proc
        returncode = None
    else:
        returncode = None if timed_out else proc.wait()
        if timed_out:
            proc.wait()
    return Completed(
        argv,
        returncode,
        out[proc.stdout].decode("utf-8", "replace"),
        out[proc.stderr].decode("utf-8", "replace"),
        time.monotonic() - start,
        timed_out=timed_out,
        abandoned=abandoned,
    )


def _pump(proc: subprocess.Popen, out: dict, deadline: float, max_output: int) -> bool:
    """Read both pipes until EOF (True) or the deadline (False)."""
    sel = selectors.DefaultSelector()
    try:
        for stream in out:
            if not stream.closed:
                os.set_blocking(stream.fileno(), False)
                sel.register(stream, selectors.EVENT_READ)
        exited_at = None
        while sel.get_map():
            now = time.monotonic()
            if exited_at is None and _has_exited(proc):
                exited_at = now  # a leftover child may hold the pipes: short grace only
                deadline = min(deadline, now + KILL_GRACE)
            remaining = deadline - now
            if remaining <= 0:
                return exited_at is not None
            for sk, _ in sel.select(min(remaining, 0.05)):
                try:
                    chunk = os.read(sk.fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(sk.fileobj)
                    continue
                buf = out[sk.fileobj]
                if len(buf) < max_output:
                    buf += chunk[: max_output - len(buf)]
        return True
    finally:
        sel.close()


def _has_exited(proc: subprocess.Popen) -> bool:
    """True once the child has exited; it is not reaped, so its pid (and so its
    process group id) stays reserved until we have killed the group."""
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # already reaped
        return True


def _wait_exit(proc: subprocess.Popen, deadline: float) -> bool:
    while not _has_exited(proc):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
