#!/usr/bin/env python3
"""Controller overhead: one node's reboot step through ``fleetmedic run`` against the same
playbooks run by plain ``ansible-playbook`` on the same node, in the same run.

Usage::

    .venv/bin/python bench/controller_overhead.py             # 3 rounds
    .venv/bin/python bench/controller_overhead.py --rounds 5

It starts the test control plane, a 1-node nspawn fleet (real sshd, real reboots) and a
kwok Node for it, then alternates, ``--rounds`` times, on the same node with the same fault
(a Xid 79 in this boot's kernel log, which a reboot cures):

- **baseline**: what an engineer runs by hand for the same step, one ``ansible-playbook``
  after another, with the same playbooks, role variables and SSH settings:
  ``diagnose.yml``, the boot_id read, ``reboot.yml``, ``verify.yml``;
- **controller**: a running ``fleetmedic run`` (started once, as the service runs); the
  clock starts when the node gets the ``fleetmedic.io/repair=reboot`` taint and stops when
  the controller has removed it (diagnose, drain, boot_id probe, reboot, verify, every
  record written to the Node, events, Leases).

It prints each side's median and their ratio (target <= 1.2). Both sides pay the same
Ansible start-up and SSH costs, so the ratio is the controller's own overhead; it does
depend on load from other processes (the load average is printed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.harness import ctlenv  # noqa: E402

BOOT_ID_PLAY = """- name: Read boot_id
  hosts: all
  gather_facts: false
  tasks:
    - name: boot_id
      ansible.builtin.command: cat /proc/sys/kernel/random/boot_id
      changed_when: false
"""


def baseline(stage: ctlenv.Stage, pbdir: Path, workdir: Path, round_: int) -> float:
    node = stage.fleet.node(1)
    (workdir / "boot_id.yml").write_text(BOOT_ID_PLAY)
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
           "PATH": f"{ctlenv.VENV_BIN}:{os.environ.get('PATH', '')}",
           "FLEETMEDIC_EVIDENCE_DIR": str(workdir / "evidence-baseline")}
    rid = f"e{round_}-reboot1-baseline{round_}{int(time.time())}"
    runs = [(pbdir / "diagnose.yml", ["-e", f"fleetmedic_request_id={rid}"]),
            (workdir / "boot_id.yml", []),
            (pbdir / "reboot.yml", ["-e", f"fleetmedic_request_id={rid}",
                                    "-e", "fleetmedic_collect_evidence=false",
                                    "-e", "fleetmedic_node_lease=false"]),   # no API server in the baseline
            (pbdir / "verify.yml", [])]
    t0 = time.monotonic()
    for playbook, extra in runs:
        p = subprocess.run([str(ctlenv.VENV_BIN / "ansible-playbook"), "-i",
                            str(stage.fleet.inventory), str(playbook), "--limit", node.name,
                            "-e", "fleetmedic_vendor=nvidia", *extra],
                           env=env, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"baseline {playbook.name} failed (rc {p.returncode}):\n"
                             f"{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return time.monotonic() - t0


def controller(stage: ctlenv.Stage, name: str, proc: ctlenv.ControllerProcess) -> float:
    t0 = time.monotonic()
    ctlenv.set_taints(stage.kube, name, lambda ts: ts + [ctlenv.repair_taint("reboot")])

    def done() -> bool:
        if not proc.alive:
            raise SystemExit(f"the controller died:\n{proc.tail()}")
        return ctlenv.in_service(stage.kube, name)
    ctlenv.wait_until(done, 600, f"{name} back in service", interval=0.1,
                      tolerate=(OSError, TimeoutError))
    elapsed = time.monotonic() - t0
    last = ctlenv.annotation(stage.kube, name, "fleetmedic.io/history")[-1]
    if last["result"] != "pass":
        raise SystemExit(f"the controller did not repair {name}: {last}")
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", default="/var/tmp", help="where its scratch directory goes "
                    "(kept, with the controller's log, when the run fails)")
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="fmbench-", dir=args.workdir))
    base: list[float] = []
    ctl: list[float] = []
    try:
        with ctlenv.Stage(1, workdir, prefix="bench-ovh") as stage:
            [name] = ctlenv.register(stage.kube, stage.fleet, "ovh")
            cfg = ctlenv.write_config(workdir / "ctl", stage.kube, stage.fleet, "ovh")
            pbdir = workdir / "ctl" / "playbooks"
            proc = ctlenv.ControllerProcess(cfg, workdir / "controller.log").start()
            try:
                ctlenv.wait_until(lambda: "watching" in proc.tail(), 60, "the controller")
                for r in range(1, args.rounds + 1):
                    ctlenv.xid79(stage.fleet.node(1))
                    base.append(baseline(stage, pbdir, workdir, r))
                    ctlenv.xid79(stage.fleet.node(1))
                    ctl.append(controller(stage, name, proc))
                    print(f"round {r}: ansible-playbook {base[-1]:.1f}s, controller {ctl[-1]:.1f}s"
                          f" (load {ctlenv.load_average()})", flush=True)
            finally:
                proc.stop()
    except BaseException:
        print(f"failed; scratch directory and controller log kept in {workdir}", file=sys.stderr)
        raise
    shutil.rmtree(workdir, ignore_errors=True)
    b, c = statistics.median(base), statistics.median(ctl)
    print(f"\nreboot step, one node, median of {args.rounds}:")
    print(f"  plain ansible-playbook (diagnose, boot_id, reboot, verify): {b:.1f} s")
    print(f"  fleetmedic controller (taint -> back in service):         {c:.1f} s")
    print(f"  ratio controller / ansible-playbook: {c / b:.2f}x (target <= 1.2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
