"""What bench/controller_overhead.py and bench/detect_to_service.py share (not a bench):
one fleet node with its kwok Node under a running ``fleetmedic run`` (built on
tests/harness/ctlenv.py), the reboot step timed from taint to back in service, and plain
``ansible-playbook`` runs on that node for the baselines. The benches put the checkout on
sys.path before importing it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import _common

from tests.harness import ctlenv

ROOT = Path(__file__).resolve().parents[1]
LEASE_NAMESPACE = "kube-system"  # ctlenv.write_config's leader_election.namespace


def parse_args(doc: str, repeats: str, default: int) -> argparse.Namespace:
    """The benches' command line: how many times to measure (``repeats``; 1 with
    ``--smoke``) and ``--workdir``."""
    ap = _common.parser(doc)
    ap.add_argument(repeats, type=int, default=default)
    ap.add_argument(
        "--workdir",
        default="/var/tmp",
        help="where its scratch directory goes "
        "(kept, with the controller's log, when the run fails)",
    )
    args = ap.parse_args()
    if args.smoke:
        setattr(args, repeats.lstrip("-"), 1)
    return args


@contextmanager
def scratch_dir(parent: str) -> Iterator[Path]:
    """A fresh directory, removed after a clean run and kept (said on stderr) after a failed one."""
    workdir = Path(tempfile.mkdtemp(prefix="fmbench-", dir=parent))
    try:
        yield workdir
    except BaseException:
        print(f"failed; scratch directory and controller log kept in {workdir}", file=sys.stderr)
        raise
    shutil.rmtree(workdir, ignore_errors=True)


@dataclass
class Running:
    """What :func:`controller_on_one_node` hands the bench."""

    stage: ctlenv.Stage
    name: str  # the kwok Node of fleet node 1
    proc: ctlenv.ControllerProcess
    playbooks: Path  # the controller's playbook dir (test group_vars), for baselines


@contextmanager
def controller_on_one_node(
    workdir: Path, prefix: str, pool: str, overrides: dict[str, Any] | None = None
) -> Iterator[Running]:
    """The test control plane, a 1-node fleet, its kwok Node and a controller watching it
    (stopped on the way out; its log stays in ``workdir``)."""
    with ctlenv.Stage(1, workdir, prefix=prefix) as stage:
        [name] = ctlenv.register(stage.kube, stage.fleet, pool)
        cfg = ctlenv.write_config(
            workdir / "ctl", stage.kube, stage.fleet, pool, overrides=overrides
        )
        proc = ctlenv.ControllerProcess(cfg, workdir / "controller.log").start()
        try:
            ctlenv.wait_until(lambda: "watching" in proc.tail(), 60, "the controller")
            yield Running(stage, name, proc, workdir / "ctl" / "playbooks")
        finally:
            proc.stop()


def reboot_taint_to_service(run: Running, state: str = "reboot") -> float:
    """Seconds from the repair taint at ``state`` (as the agent sets it on detection) to the
    Node back in service (taint gone, schedulable)."""
    t0 = time.monotonic()
    ctlenv.set_taints(run.stage.kube, run.name, lambda ts: [*ts, ctlenv.repair_taint(state)])

    def in_service() -> bool:
        if not run.proc.alive:
            raise SystemExit(f"the controller died:\n{run.proc.tail()}")
        return ctlenv.in_service(run.stage.kube, run.name)

    ctlenv.wait_until(
        in_service,
        600,
        f"{run.name} back in service",
        interval=0.1,
        tolerate=(OSError, TimeoutError),
    )
    return time.monotonic() - t0


def ansible_playbook(
    run: Running, playbook: Path, args: Sequence[str] = (), env: dict[str, str] | None = None
) -> None:
    """``ansible-playbook`` on the node as an engineer runs it by hand (same ansible.cfg and
    inventory as the controller); a failure ends the bench with its output."""
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "PATH": f"{ctlenv.VENV_BIN}:{os.environ.get('PATH', '')}",
        **(env or {}),
    }
    fleet = run.stage.fleet
    p = subprocess.run(
        [
            str(ctlenv.VENV_BIN / "ansible-playbook"),
            "-i",
            str(fleet.inventory),
            str(playbook),
            "--limit",
            fleet.node(1).name,
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        raise SystemExit(
            f"{playbook.name} failed (rc {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
        )


LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+) INFO (.*)$")
STEP = re.compile(r"^\S+: (?:(run|drain|probe) (\w+) \(|RepairStarted|Repaired:)")


def phase_times(log: str) -> dict[str, float]:
    """Mean seconds per phase over the trials, from the controller's log: each phase lasts
    from its action's start to the next action's start (the last one to ``Repaired``)."""
    totals: dict[str, float] = {}
    count: dict[str, int] = {}
    current: tuple[str, datetime] | None = None
    for line in log.splitlines():
        m = LINE.match(line)
        s = STEP.match(m.group(2)) if m else None
        if not s:
            continue
        at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
        if current is not None:
            name, began = current
            totals[name] = totals.get(name, 0.0) + (at - began).total_seconds()
            count[name] = count.get(name, 0) + 1
        label = s.group(1) and (s.group(1) if s.group(1) != "run" else s.group(2))
        current = (label, at) if label else None
    return {k: totals[k] / count[k] for k in totals}
