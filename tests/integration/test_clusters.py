"""One controller, two clusters (issue 17 item 4): two real API servers, each with a Node
mapped onto the same nspawn SSH fleet, served by one `fleetmedic run` with `clusters:`.

Each cluster's fault is repaired with its own Leases and history; then one API server is
stopped: the other cluster's next fault is still repaired, the controller stays up, and
`fleetmedic status` shows the live cluster and names the dead one in one line (exit 1).
Fast stand-in playbooks as in test_safety_budget.py: this times the controller, not reboots.
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.harness import ctlenv
from tests.harness.ctlbench import fast_playbooks
from tests.harness.ctlenv import cli, history, wait_until
from tests.harness.kube import KubeCluster, find_binaries

pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]


@pytest.fixture
def second_kube(tmp_path):
    cluster = KubeCluster(tmp_path / "kube-b", binaries=find_binaries()).start()
    yield cluster
    cluster.stop(keep_logs=True)


def repaired(kube, name: str) -> bool:
    return [(a["step"], a["result"]) for a in history(kube, name)] == [("reboot", "pass")] and (
        not ctlenv.node(kube, name)["spec"].get("taints")
    )


def test_one_controller_repairs_two_clusters_and_survives_one_going_down(
    safety_bench, second_kube, tmp_path
):
    b = safety_bench(2, tag="mc")
    kube_a, kube_b = b.kube, second_kube
    fault = [ctlenv.repair_taint("reboot")]
    one, two = b.fleet.node(1), b.fleet.node(2)
    [a1] = b.make_nodes([f"{b.pool}-a1"], [one.address], taints=fault)
    [a2] = b.make_nodes([f"{b.pool}-a2"], [two.address])
    [b1] = ctlenv.register(kube_b, b.fleet, b.pool, nodes=[one], taints={f"{b.pool}-1": fault})
    cfg = b.config(
        ansible={"playbook_dir": fast_playbooks(tmp_path), "forks": 5},
        ladder={"reboot": {"phases": ["drain", "verify"]}},
        clusters=[
            {"name": "alpha", "kube": {"kubeconfig": str(kube_a.kubeconfig)}},
            {"name": "beta", "kube": {"kubeconfig": str(kube_b.kubeconfig)}},
        ],
    )
    port = yaml.safe_load(cfg.read_text())["metrics"]["port"]
    proc = b.controller(cfg)

    def both() -> bool:
        assert proc.alive, proc.tail(40)
        return repaired(kube_a, a1) and repaired(kube_b, b1)

    wait_until(both, 120, "a fault in each cluster repaired")
    # node names repeat across clusters: each line says which cluster it is about
    log = proc.log.read_text()
    assert f"[alpha] {a1}: " in log and f"[beta] {b1}: " in log, proc.tail(40)
    audits = [json.loads(line[line.index("{") :]) for line in log.splitlines() if '"audit"' in line]
    assert {(a["cluster"], a["node"]) for a in audits} >= {("alpha", a1), ("beta", b1)}
    for kube in (kube_a, kube_b):  # each cluster holds its own leader Lease
        lease = kube.request(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/fleetmedic-{b.pool}"
        )
        assert lease["spec"]["holderIdentity"]
    assert (
        ctlenv.scrape(
            port, 'fleetmedic_remediations_total{cluster="beta",result="pass",step="reboot"}'
        )
        == 1
    )

    # beta's API server goes away; alpha goes on
    kube_b.stop(keep_logs=True)
    ctlenv.set_taints(kube_a, a2, lambda t: [*t, *fault])
    wait_until(lambda: proc.alive and repaired(kube_a, a2), 120, "alpha repaired with beta down")
    assert proc.alive

    r = cli(cfg, "status", "--json", "--all")
    assert r.returncode == 3, "a cluster did not answer (exit 3: a dependency unreachable)"
    [err] = [line for line in r.stderr.splitlines() if line.strip()]
    assert err.startswith("fleetmedic: error: cluster beta: "), r.stderr
    rows = json.loads(r.stdout)
    assert {(row["cluster"], row["name"], row["state"]) for row in rows} == {
        ("alpha", a1, "healthy"),
        ("alpha", a2, "healthy"),
    }
    r = cli(cfg, "history", a1)
    assert r.returncode != 0 and "name one with --cluster" in r.stderr
    r = cli(cfg, "history", a1, "--cluster", "alpha", "--json")
    assert r.returncode == 0, r.stderr
