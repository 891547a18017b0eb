"""The repair budget with the real controller: 30 Nodes fail at once, max_concurrent=3.

30 kwok Nodes are mapped onto 3 nspawn SSH nodes (10 Nodes each), and the ladder runs
fast test playbooks (``ping`` and a short ``sleep``; phases drain then verify, one playbook
run per node, so the test stays near 2 minutes on a loaded 2-core machine; in a playbook
directory given by the config's ``ansible.playbook_dir``) instead of the collection's
diagnose/reboot/verify.
Why: 30 real reboots through 3 slots take about 10 rounds of ~25 s on this 2-core
machine (over 4 minutes), and Nodes that share an SSH node cannot each reboot it. The
controller's work is all real: watch, budget, node Leases, drain (cordon, no pods),
the boot_id probe, ansible-runner over SSH, and the history it records.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime

import pytest

from tests.harness import ctlenv
from tests.harness.ctlbench import fast_config
from tests.harness.ctlenv import history, state_of, wait_until

pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]


def _t(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def intervals(kube, names: list[str]) -> dict[str, list[tuple[datetime, datetime, dict]]]:
    return {
        n: [
            (_t(a["start"]), _t(a["end"]), a)
            for a in history(kube, n)
            if a.get("start") and a.get("end")
        ]
        for n in names
    }


def max_overlap(spans: list[tuple[datetime, datetime]]) -> int:
    """Most spans open at one instant (an end and a start at the same instant do not overlap)."""
    points = sorted(
        [(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda p: (p[0], p[1])
    )
    best = cur = 0
    for _, d in points:
        cur += d
        best = max(best, cur)
    return best


def in_flight_now(kube, pool: str) -> int:
    nodes = kube.request("GET", f"/api/v1/nodes?labelSelector={ctlenv.POOL_LABEL}%3D{pool}")
    return sum(
        1
        for n in nodes["items"]
        if "fleetmedic.io/in-flight" in (n["metadata"].get("annotations") or {})
    )


def test_thirty_fail_at_once_never_more_than_three_in_repair(safety_bench):
    b = safety_bench(3, tag="bud")
    fleet_nodes = list(b.fleet.nodes)
    names = [f"{b.pool}-{i:02d}" for i in range(30)]
    b.make_nodes(
        names,
        [fleet_nodes[i % 3].address for i in range(30)],
        taints=[ctlenv.repair_taint("reboot")],
    )
    cfg = fast_config(b, b.dir)
    proc = b.controller(cfg)

    seen: list[int] = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            try:
                seen.append(in_flight_now(b.kube, b.pool))
            except Exception:  # a slow answer on a loaded machine: skip this sample
                pass
            time.sleep(0.25)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    t0 = time.monotonic()
    try:

        def all_done():
            assert proc.alive, proc.tail()
            return all(state_of(b.kube, n) == "healthy" for n in names)

        wait_until(all_done, 170, "all 30 nodes repaired", interval=2)
    finally:
        stop.set()
        t.join(5)
    took = time.monotonic() - t0
    spans = intervals(b.kube, names)
    for n in names:
        steps = [(a["step"], a["result"]) for *_, a in spans[n]]
        assert steps == [("reboot", "pass")], f"{n}: {steps}"
    flat = [(s, e) for n in names for s, e, _ in spans[n]]
    peak = max_overlap(flat)
    assert peak <= 3, f"{peak} nodes in repair at once (history intervals)"
    assert peak == 3, "the budget was used (3 at a time), not serialised"
    assert max(seen) <= 3, f"sampled in-flight markers: peak {max(seen)}"
    print(
        f"30 nodes repaired in {took:.0f}s; peak concurrent {peak} (history), "
        f"{max(seen)} (sampled, {len(seen)} samples)"
    )
