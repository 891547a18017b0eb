#!/usr/bin/env python3
"""Controller overhead: one node's reboot step through ``fleetmedic run`` against the same
playbooks run by plain ``ansible-playbook`` on the same node, in the same run.

Usage::

    .venv/bin/python bench/controller_overhead.py             # 3 rounds
    .venv/bin/python bench/controller_overhead.py --rounds 5
    .venv/bin/python bench/controller_overhead.py --smoke     # 1 round, target not enforced

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

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _common  # noqa: E402
import _one_node as one_node  # noqa: E402

from tests.harness import ctlenv  # noqa: E402

BOOT_ID_PLAY = """- name: Read boot_id
  hosts: all
  gather_facts: false
  tasks:
    - name: boot_id
      ansible.builtin.command: cat /proc/sys/kernel/random/boot_id
      changed_when: false
"""


BASELINE_PHASES = ("diagnose", "probe", "reboot", "verify")
"""What each baseline playbook stands for among the controller's phases (its log's labels)."""


def baseline(
    run: one_node.Running, workdir: Path, round_: int, split: dict[str, list[float]]
) -> float:
    (workdir / "boot_id.yml").write_text(BOOT_ID_PLAY)
    env = {"FLEETMEDIC_EVIDENCE_DIR": str(workdir / "evidence-baseline")}
    rid = f"e{round_}-reboot1-baseline{round_}{int(time.time())}"
    pbdir = run.playbooks
    runs = [
        (pbdir / "diagnose.yml", ["-e", f"fleetmedic_request_id={rid}"]),
        (workdir / "boot_id.yml", []),
        (
            pbdir / "reboot.yml",
            [
                "-e",
                f"fleetmedic_request_id={rid}",
                "-e",
                "fleetmedic_collect_evidence=false",
                "-e",
                "fleetmedic_node_lease=false",
            ],
        ),  # no API server in the baseline
        (pbdir / "verify.yml", []),
    ]
    t0 = time.monotonic()
    for phase, (playbook, extra) in zip(BASELINE_PHASES, runs, strict=True):
        started = time.monotonic()
        one_node.ansible_playbook(run, playbook, ["-e", "fleetmedic_vendor=nvidia", *extra], env)
        split.setdefault(phase, []).append(time.monotonic() - started)
    return time.monotonic() - t0


def controller(run: one_node.Running) -> float:
    elapsed = one_node.reboot_taint_to_service(run)
    last = ctlenv.annotation(run.stage.kube, run.name, "fleetmedic.io/history")[-1]
    if last["result"] != "pass":
        raise SystemExit(f"the controller did not repair {run.name}: {last}")
    return elapsed


def print_split(split: dict[str, list[float]], phases: dict[str, float]) -> None:
    """Where each side's time goes, per phase (means over the rounds): the controller's phase
    runs from its action's start to the next action's start, so its figure includes the
    controller's own work between the two (writes, events, the next decision)."""
    print("\nper phase, mean seconds (controller: from the phase's start to the next one's):")
    print(f"  {'phase':<10} {'ansible-playbook':>17} {'controller':>11} {'extra':>7}")
    names = [*BASELINE_PHASES, *(p for p in phases if p not in BASELINE_PHASES)]
    for name in names:
        b = statistics.mean(split[name]) if name in split else None
        c = phases.get(name)
        cells = [f"{b:17.2f}" if b is not None else f"{'-':>17}"]
        cells.append(f"{c:11.2f}" if c is not None else f"{'-':>11}")
        cells.append(f"{c - b:+7.2f}" if b is not None and c is not None else f"{'':>7}")
        print(f"  {name:<10} {' '.join(cells)}")


def main() -> int:
    args = one_node.parse_args(__doc__, "--rounds", 3)
    base: list[float] = []
    ctl: list[float] = []
    split: dict[str, list[float]] = {}
    with (
        one_node.scratch_dir(args.workdir) as workdir,
        one_node.controller_on_one_node(workdir, "bench-ovh", "ovh") as run,
    ):
        for r in range(1, args.rounds + 1):
            ctlenv.xid79(run.stage.fleet.node(1))
            base.append(baseline(run, workdir, r, split))
            ctlenv.xid79(run.stage.fleet.node(1))
            ctl.append(controller(run))
            print(
                f"round {r}: ansible-playbook {base[-1]:.1f}s, controller {ctl[-1]:.1f}s"
                f" (load {ctlenv.load_average()})",
                flush=True,
            )
        phases = one_node.phase_times(run.proc.log.read_text(errors="replace"))
    print_split(split, phases)
    b, c = statistics.median(base), statistics.median(ctl)
    print(f"\nreboot step, one node, median of {args.rounds}:")
    print(f"  plain ansible-playbook (diagnose, boot_id, reboot, verify): {b:.1f} s")
    print(f"  fleetmedic controller (taint -> back in service):         {c:.1f} s")
    print(f"  ratio controller / ansible-playbook: {c / b:.2f}x")
    return _common.verdict([("ratio <= 1.2x", c / b <= 1.2)], args.smoke)


if __name__ == "__main__":
    sys.exit(main())
