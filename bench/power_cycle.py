#!/usr/bin/env python3
"""Fenced -> back in service through the power_cycle rung (a cold boot through the node's
Redfish BMC), against the reboot rung for a fault a reboot cures, in the same run.

Usage::

    .venv/bin/python bench/power_cycle.py              # 3 trials of each
    .venv/bin/python bench/power_cycle.py --trials 5
    .venv/bin/python bench/power_cycle.py --smoke      # 1 of each, targets not enforced

One nspawn node (real sshd, real nspawn boots of about a second) with its own Redfish BMC
(sushy-tools, tests/harness/bmc.py: ForceOff kills the node's machine, On boots it) under
a ``fleetmedic run`` whose ladder is reboot -> power_cycle -> manual and whose ``bmc:``
section has the shipped defaults but for the request timeout (``off_time`` 10 s: the node
stays off that long, as on a real server). A reboot trial, the baseline, fences the node
at ``reboot`` for a Xid 79 in this boot's log; the reboot rung runs diagnose, drain, the
boot_id probe, ``reboot.yml`` and verify. A power-cycle trial loses GPU 1 until the power
is cut and fences the node at ``power_cycle``; that rung runs diagnose, drain, the probe,
``power_cycle.yml`` (power state and SEL through Redfish, ForceOff, wait for Off, the off
time, On, SSH and a new boot id) and verify. The clock runs from the taint to the node
back in service. It prints both medians, their ratio, each phase's mean time, and checks
the targets: one power-off per power-cycle trial (never two), and the power_cycle rung
back in service within 90 s (median). On a bare-metal server both rungs are dominated
by POST and memory training (minutes), so the ratio there is nearer 1 than here, where a
boot costs a second and the off time and the BMC's requests are the difference.
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
from tests.harness.bmc import BmcSet, lost_until_power_off  # noqa: E402

POOL = "pcbench"
ADDRESS_LABEL = "fleetmedic.io/bmc-address"
TAINT_VALUE = {"reboot": "reboot", "power_cycle": "power-cycle"}


def main() -> int:
    args = one_node.parse_args(__doc__, "--trials", 3)
    cycle: list[float] = []
    reboot: list[float] = []
    offs: list[int] = []
    with (
        one_node.scratch_dir(args.workdir) as workdir,
        ctlenv.Stage(1, workdir, prefix="bench-pc") as stage,
        BmcSet(workdir) as bmcs,
    ):
        fleet = stage.fleet
        bmcs.start(fleet)
        node, bmc = fleet.node(1), bmcs[fleet.node(1).name]
        name = f"{POOL}-1"
        stage.kube.make_nodes(
            [name],
            labels={
                ctlenv.POOL_LABEL: POOL,
                "fleetmedic.io/gpu-vendor": "nvidia",
                "fleetmedic.io/expected-gpus": "2",
                ADDRESS_LABEL: bmc.address,
            },
            addresses=[node.address],
        )
        creds = workdir / "creds"
        creds.mkdir(mode=0o700)
        (creds / "user").write_text(bmcs.username + "\n")
        (creds / "password").write_text(bmcs.password + "\n")
        cfg = ctlenv.write_config(
            workdir / "ctl",
            stage.kube,
            fleet,
            POOL,
            overrides={
                "ladder": {
                    "order": ["reboot", "power_cycle", "manual"],
                    "playbooks": {"power_cycle": {"playbook": "power_cycle.yml"}},
                },
                "bmc": {
                    "username_file": str(creds / "user"),
                    "password_file": str(creds / "password"),
                    "timeout": "10s",
                },
                # every trial is a new episode on the same node: not a flapping node
                "safety": {"flap": {"count": 8, "window": 1}},
            },
        )
        ctlenv.playbook_dir(workdir / "ctl", {"power_cycle_verify": False})
        proc = ctlenv.ControllerProcess(cfg, workdir / "controller.log").start()
        try:
            ctlenv.wait_until(lambda: "watching" in proc.tail(), 60, "the controller")
            run = one_node.Running(stage, name, proc, workdir / "ctl" / "playbooks")
            for i in range(1, args.trials + 1):
                ctlenv.xid79(node)
                reboot.append(taint_to_service(run, "reboot"))
                before = bmc.power_offs()
                lost_until_power_off(node)
                cycle.append(taint_to_service(run, "power_cycle"))
                offs.append(bmc.power_offs() - before)
                print(
                    f"trial {i}: reboot rung {reboot[-1]:.1f}s, power_cycle rung "
                    f"{cycle[-1]:.1f}s, power-offs {offs[-1]} "
                    f"(load {ctlenv.load_average()})",
                    flush=True,
                )
        finally:
            proc.stop()
        phases = one_node.phase_times(proc.log.read_text(errors="replace"))
    c, b = statistics.median(cycle), statistics.median(reboot)
    print(f"\nfenced -> back in service, one nspawn node, {args.trials} trial(s) each:")
    print(f"  reboot rung:      median {b:.1f} s (min {min(reboot):.1f}, max {max(reboot):.1f})")
    print(f"  power_cycle rung: median {c:.1f} s (min {min(cycle):.1f}, max {max(cycle):.1f})")
    print(f"  ratio power_cycle/reboot {c / b:.2f}x (off time 10 s included)")
    print("  mean seconds per phase: " + ", ".join(f"{k} {v:.1f}" for k, v in phases.items()))
    return _common.verdict(
        [
            ("one power-off per power-cycle trial", all(n == 1 for n in offs)),
            ("power_cycle rung back in service within 90 s (median)", c <= 90),
        ],
        args.smoke,
    )


def taint_to_service(run: one_node.Running, state: str) -> float:
    """Seconds from our repair taint at ``state`` to the Node back in service."""
    t0 = time.monotonic()
    taint = {"key": "fleetmedic.io/repair", "value": TAINT_VALUE[state], "effect": "NoSchedule"}
    ctlenv.set_taints(run.stage.kube, run.name, lambda ts: [*ts, taint])

    def in_service() -> bool:
        if not run.proc.alive:
            raise SystemExit(f"the controller died:\n{run.proc.tail()}")
        return ctlenv.in_service(run.stage.kube, run.name)

    ctlenv.wait_until(
        in_service, 600, f"{run.name} back in service", interval=0.1, tolerate=(OSError,)
    )
    return time.monotonic() - t0


if __name__ == "__main__":
    sys.exit(main())
