"""NVIDIA checks: read NVML once in a killable child process, then judge.

:func:`collect` runs :mod:`fleetmedic.checks.nvml_worker` under a hard
deadline and turns its JSON lines into a :class:`Snapshot` (every reading a
value or an NVML error, plus the call that was in flight if the deadline hit).
:func:`run` judges the snapshot with :mod:`fleetmedic.checks.nvidia_rules`.
Reading and judging are split so the rules are plain functions over data.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

from fleetmedic.checks import nvidia_rules
from fleetmedic.checks.base import CheckResult, with_duration
from fleetmedic.checks.config import CheckConfig
from fleetmedic.checks.nvidia_rules import NVML_CALLS
from fleetmedic.checks.proc import Completed, run_bounded

Reading = Mapping[str, Any]  # {"value": v} or {"error": NAME, "code": n, "message": text}


@dataclasses.dataclass(frozen=True)
class Snapshot:
    system: Mapping[str, Reading]  # init, driver_version, count
    gpus: Mapping[int, Mapping[str, Reading]]  # index -> op -> reading
    complete: bool  # the worker got to the end
    hung: tuple[str, int | None] | None = None  # (op, gpu) in flight at the deadline
    failure: str | None = None  # why the worker stopped early, one line
    timeout: float = 0.0

    def hung_call(self) -> str | None:
        return _call_text(self.hung) if self.hung else None


def _call_text(hung: tuple[str, int | None] | None) -> str:
    if not hung:
        return "(unknown)"
    op, gpu = hung
    return NVML_CALLS.get(op, op) + (f" on GPU {gpu}" if gpu is not None else "")


def parse(lines: str, run: Completed | None = None, timeout: float = 0.0) -> Snapshot:
    """Turn the worker's output into a Snapshot; tolerant of a cut-off last line."""
    system: dict[str, Reading] = {}
    gpus: dict[int, dict[str, Reading]] = {}
    pending: tuple[str, int | None] | None = None
    complete = False
    for line in lines.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if not isinstance(msg, dict):
            continue
        if "begin" in msg:
            pending = (str(msg["begin"]), msg.get("gpu"))
            continue
        op = msg.get("op")
        if op == "done":
            complete = True
            continue
        reading = {k: msg[k] for k in ("value", "error", "code", "message") if k in msg}
        gpu = msg.get("gpu")
        if gpu is None:
            system[str(op)] = reading
        else:
            gpus.setdefault(int(gpu), {})[str(op)] = reading
        pending = None
    hung = pending if run is not None and run.timed_out else None
    failure = None
    if not complete and run is not None:
        if run.timed_out and run.error:
            failure = run.error
        elif run.timed_out:
            failure = (
                f"NVML call {_call_text(hung)} did not return within {timeout:g}s"
                " (driver hung?); reader killed"
            )
        else:
            failure = "NVML reader stopped early: " + run.describe()
    return Snapshot(system, gpus, complete, hung, failure, timeout)


def collect(
    timeout: float, env: Mapping[str, str] | None = None, identity: bool = False
) -> Snapshot:
    """Read NVML in a child process; at ``timeout`` it is killed and what it
    printed so far is kept. ``identity``: the serial and versions too (nvml_worker)."""
    run = run_bounded(
        [
            sys.executable,
            "-m",
            "fleetmedic.checks.nvml_worker",
            *(["--identity"] if identity else []),
        ],
        timeout,
        env=env if env is not None else os.environ,
        key="nvml",
    )
    return parse(run.stdout, run, timeout)


def run(cfg: CheckConfig, env: Mapping[str, str] | None = None) -> list[CheckResult]:
    start = time.monotonic()
    snap = collect(cfg.timeout, env)
    return with_duration(nvidia_rules.evaluate(snap, cfg), time.monotonic() - start)


def library_missing(snap: Snapshot) -> bool:
    """True when libnvidia-ml.so.1 could not be loaded at all: on `auto`, not an NVIDIA node."""
    return (snap.system.get("init") or {}).get("error") == "LIBRARY_NOT_FOUND"


def driver_not_loaded(snap: Snapshot) -> bool:
    return (snap.system.get("init") or {}).get("error") == "DRIVER_NOT_LOADED"
