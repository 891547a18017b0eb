# Copyright: fleetmedic developers
# Apache License 2.0 (see galaxy.yml)
"""Running commands with a hard timeout, and reading ``fleetmedic check --json``.

Shared by the gpu_check and collect_evidence modules. Runs on the managed node
with its own Python (3.8+), so it uses only the standard library.

``fleetmedic check`` exits 0 (healthy), 1 (problem) or 2 (unknown), as
node-problem-detector plugins do. The exit code is authoritative; the JSON
(a list of results, or a dict with ``results``) gives the evidence. A result
has ``name``, ``status`` (ok/problem/unknown), ``summary`` and ``evidence``.
A timeout, a crash or any other exit code reads as ``unknown``, never ``ok``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

STATUS_BY_RC = {0: "ok", 1: "problem", 2: "unknown"}
EXTRA_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def search_path():
    """PATH with the sbin directories added (modules may start with a short PATH)."""
    parts = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    return os.pathsep.join(parts + [p for p in EXTRA_PATH if p not in parts])


def which(name):
    if os.sep in name:
        return name if os.access(name, os.X_OK) and os.path.isfile(name) else None
    return shutil.which(name, path=search_path())


def run(argv, timeout, stdout=subprocess.PIPE, stderr=subprocess.PIPE):
    """Run ``argv`` (never through a shell) with a hard timeout.

    Returns ``(rc, out, err, seconds, timed_out)``; ``rc`` is None on a timeout,
    and the whole process group is killed so a hung child cannot linger.
    """
    start = time.monotonic()
    env = dict(os.environ, PATH=search_path(), LC_ALL="C")
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err, time.monotonic() - start, False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        out, err = proc.communicate()
        return None, out, err, time.monotonic() - start, True


def parse_results(text):
    """The list of result dicts in ``fleetmedic check --json`` output ([] if unreadable)."""
    try:
        data = json.loads(text or "")
    except ValueError:
        return None
    if isinstance(data, dict):
        data = data.get("results", [])
    if not isinstance(data, list):
        return None
    return [r for r in data if isinstance(r, dict)]


def overall_status(rc, timed_out):
    if timed_out or rc is None:
        return "unknown"
    return STATUS_BY_RC.get(rc, "unknown")


def summary_lines(results):
    """One line per result that is not ok: ``name: status: summary``."""
    lines = []
    for r in results or []:
        status = r.get("status", "unknown")
        if status != "ok":
            lines.append(
                "%s: %s: %s"
                % (r.get("name", "?"), status, " ".join(str(r.get("summary", "")).split()))
            )
    return lines


def message(status, rc, results, timed_out, timeout, stderr_tail):
    """One line an operator can act on."""
    if timed_out:
        return "unknown: fleetmedic check did not finish within %s s" % timeout
    if rc not in STATUS_BY_RC:
        return "unknown: fleetmedic check exited %s: %s" % (rc, stderr_tail or "no output")
    lines = summary_lines(results)
    if status == "ok":
        return "ok: %d checks passed" % len(results or [])
    if not lines:
        return "%s: exit %s, %s" % (status, rc, stderr_tail or "no details in the check output")
    return "%s: %s" % (status, "; ".join(lines))
