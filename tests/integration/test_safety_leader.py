"""Two controllers on one pool (as on two bastions): the leader Lease lets exactly one act;
SIGKILL the leader mid-work and the other takes over within the lease duration, without
repeating work that was finished. Fast test playbooks (see test_safety_budget.py); 8 kwok
Nodes share 2 SSH nodes; max_concurrent 2 so the work spans the kill.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.harness import ctlenv
from tests.harness.ctlbench import fast_config
from tests.harness.ctlenv import history, state_of, wait_until

pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]

LEASE_DURATION = 6  # ctlenv.write_config's leader_election (renew 4 s, retry 1 s)


def runs_for(run_dir: Path) -> list[str]:
    """Node names of the playbook runs a controller started (run ids:
    <time>-<node>-<phase>-<hex>)."""
    if not run_dir.exists():
        return []
    return [
        re.sub(r"^\d{8}T\d{6}Z-(.*)-[a-z]+-[0-9a-f]{8}$", r"\1", d.name) for d in run_dir.iterdir()
    ]


def holder(kube, pool: str) -> str | None:
    lease = kube.request(
        "GET",
        f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/fleetmedic-{pool}",
        ok=(404,),
    )
    return (lease.get("spec") or {}).get("holderIdentity")


def test_two_controllers_one_acts_and_the_other_takes_over_after_sigkill(safety_bench):
    b = safety_bench(2, tag="ldr")
    fleet_nodes = list(b.fleet.nodes)
    names = [f"{b.pool}-{i}" for i in range(8)]
    b.make_nodes(
        names,
        [fleet_nodes[i % 2].address for i in range(8)],
        taints=[ctlenv.repair_taint("reboot")],
    )
    cfgs = [fast_config(b, b.dir, name=f"ctl{i}", max_concurrent=2) for i in (1, 2)]
    procs = [b.controller(cfgs[0], n=1), b.controller(cfgs[1], n=2)]
    ids = {p.proc.pid: p for p in procs}
    lead_id = wait_until(lambda: holder(b.kube, b.pool), 30, "a leader")
    leader = ids[int(lead_id.rsplit("-", 1)[1])]
    other = procs[1] if leader is procs[0] else procs[0]
    other_runs = b.dir / ("ctl2" if other is procs[1] else "ctl1") / "runs"
    leader_runs = b.dir / ("ctl1" if other is procs[1] else "ctl2") / "runs"

    done = wait_until(
        lambda: (
            [n for n in names if state_of(b.kube, n) == "healthy" and history(b.kube, n)]
            if sum(1 for n in names if state_of(b.kube, n) == "healthy" and history(b.kube, n)) >= 3
            else None
        ),
        120,
        "three nodes repaired by the leader",
    )
    assert runs_for(other_runs) == [], "the standby ran nothing while the leader lived"
    assert "leading as" not in other.log.read_text()
    leader.kill9()
    killed = time.monotonic()
    wait_until(
        lambda: "leading as" in other.log.read_text(),
        LEASE_DURATION + 10,
        "the standby to take over",
    )
    took = time.monotonic() - killed
    assert took <= LEASE_DURATION + 2, f"took over after {took:.1f}s"

    def all_done():
        assert other.alive, other.tail()
        return all(state_of(b.kube, n) == "healthy" for n in names)

    wait_until(all_done, 150, "the new leader to finish the pool")
    for n in names:
        assert [(a["step"], a["result"]) for a in history(b.kube, n)] == [("reboot", "pass")], n
    redone = set(done) & set(runs_for(other_runs))
    assert not redone, f"finished work repeated on {redone}"
    print(
        f"takeover {took:.1f}s after SIGKILL (lease {LEASE_DURATION}s); the leader had "
        f"finished {len(done)} nodes, {len(set(runs_for(leader_runs)))} touched"
    )
