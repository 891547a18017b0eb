#!/usr/bin/env python3
"""Detect -> back in service: one node, a fault a reboot cures, through the controller.

Usage::

    .venv/bin/python bench/detect_to_service.py              # 10 trials
    .venv/bin/python bench/detect_to_service.py --trials 3

It starts the test control plane, a 1-node nspawn fleet (real sshd; a reboot is a real
nspawn reboot, ~1 s of boot) and a kwok Node for it, and a ``fleetmedic run`` with the
shipped ladder (reboot step: diagnose, drain, boot_id probe, reboot, verify). Each trial
puts a Xid 79 in the node's kernel log and fences the node as the agent does on
detection (taint ``fleetmedic.io/repair=reboot``); the clock stops when the node is
back in service (taint gone, schedulable again). It prints p50 (target <= 45 s), p90,
and as the baseline measured in the same run the node's bare reboot through
``ansible-playbook reboot.yml`` alone, to show what the rest of the ladder costs.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.harness import ctlenv  # noqa: E402


def bare_reboot(stage: ctlenv.Stage, pbdir: Path, trial: int) -> float:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
           "PATH": f"{ctlenv.VENV_BIN}:{os.environ.get('PATH', '')}"}
    t0 = time.monotonic()
    p = subprocess.run([str(ctlenv.VENV_BIN / "ansible-playbook"), "-i", str(stage.fleet.inventory),
                        str(pbdir / "reboot.yml"), "--limit", stage.fleet.node(1).name,
                        "-e", f"fleetmedic_request_id=bare-{trial}-{int(time.time())}",
                        "-e", "fleetmedic_collect_evidence=false"],
                       env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"reboot.yml failed (rc {p.returncode}):\n{p.stdout[-2000:]}\n"
                         f"{p.stderr[-2000:]}")
    return time.monotonic() - t0


def trial(stage: ctlenv.Stage, name: str, proc: ctlenv.ControllerProcess) -> float:
    ctlenv.xid79(stage.fleet.node(1))
    t0 = time.monotonic()
    ctlenv.set_taints(stage.kube, name, lambda ts: ts + [ctlenv.repair_taint("reboot")])

    def in_service() -> bool:
        if not proc.alive:
            raise SystemExit(f"the controller died:\n{proc.tail()}")
        return ctlenv.in_service(stage.kube, name)
    ctlenv.wait_until(in_service, 600, f"{name} back in service", interval=0.1,
                      tolerate=(OSError, TimeoutError))
    return time.monotonic() - t0


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


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--workdir", default="/var/tmp", help="where its scratch directory goes "
                    "(kept, with the controller's log, when the run fails)")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="fmbench-", dir=args.workdir))
    times: list[float] = []
    bare: list[float] = []
    try:
        with ctlenv.Stage(1, workdir, prefix="bench-d2s") as stage:
            [name] = ctlenv.register(stage.kube, stage.fleet, "d2s")
            # flap damping would send the 8th entry within a week to manual: these trials
            # are not a flapping node, so its window is cut to a second
            cfg = ctlenv.write_config(workdir / "ctl", stage.kube, stage.fleet, "d2s",
                                      overrides={"safety": {"flap": {"count": 8, "window": 1}}})
            pbdir = workdir / "ctl" / "playbooks"
            proc = ctlenv.ControllerProcess(cfg, workdir / "controller.log").start()
            try:
                ctlenv.wait_until(lambda: "watching" in proc.tail(), 60, "the controller")
                for i in range(1, args.trials + 1):
                    times.append(trial(stage, name, proc))
                    msg = f"trial {i}: {times[-1]:.1f}s"
                    if i % 3 == 1:
                        bare.append(bare_reboot(stage, pbdir, i))
                        msg += f"; bare reboot.yml {bare[-1]:.1f}s"
                    print(f"{msg} (load {ctlenv.load_average()})", flush=True)
            finally:
                proc.stop()
        phases = phase_times(proc.log.read_text(errors="replace"))
    except BaseException:
        print(f"failed; scratch directory and controller log kept in {workdir}", file=sys.stderr)
        raise
    shutil.rmtree(workdir, ignore_errors=True)
    p50, b = statistics.median(times), statistics.median(bare)
    print(f"\ndetect -> back in service, one node, {args.trials} trials:")
    print(f"  p50 {p50:.1f} s, p90 {pct(times, 90):.1f} s, min {min(times):.1f} s, "
          f"max {max(times):.1f} s (target p50 <= 45 s)")
    print(f"  baseline, bare `ansible-playbook reboot.yml`: median {b:.1f} s; "
          f"ratio {p50 / b:.2f}x (the rest is evidence, drain, boot_id probe, verify)")
    print("  mean seconds per phase: " + ", ".join(f"{k} {v:.1f}" for k, v in phases.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
