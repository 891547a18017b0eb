"""The return gate's burn-in through the controller: a kwok Node mapped onto a fleet node
that really reboots, real Ansible, ``fleetmedic run`` as a subprocess, the pool's ladder
with ``burnin: {enabled: true}``. The GPUs are the fakes: the fake dcgmi replays a published
pass, the fake all_reduce_perf reports the node scenario's bus bandwidth, judged against a
2-GPU hardware profile the node's check config brings (picked by the Node's instance-type
label, which the controller passes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.harness import ctlenv, partitions
from tests.harness.ctlbench import Benches, pool_name
from tests.harness.ctlenv import history, wait_state, wait_until

pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]

DCGM = Path(__file__).parents[1] / "unit" / "checks" / "data" / "dcgm"
PROFILES = "/etc/fleetmedic/burnin-profiles.yaml"
PROFILE = "profiles:\n  fleet-2gpu:\n    match: [fleet-2gpu]\n    expected_busbw_gbps: 300\n"
INSTANCE = {"node.kubernetes.io/instance-type": "fleet-2gpu"}


@pytest.fixture
def bench(kube, fleet_factory, tmp_path):
    benches = Benches(kube, fleet_factory, tmp_path)
    yield lambda nodes=1: benches.new(nodes, pool_name("bi"))
    benches.stop_controllers(log_lines=80)
    benches.delete_nodes()


def burnin_node(node, busbw: float) -> None:
    """The node's check config names the 2-GPU profile file; dcgmi passes; the all-reduce
    reaches ``busbw`` GB/s at large sizes."""
    check = ctlenv.CHECK_YAML + f"hardware:\n  profiles: {PROFILES}\n"
    node.ssh(
        f"printf '%s' '{PROFILE}' > {PROFILES}"
        f" && printf '%s' '{check}' > /etc/fleetmedic/check.yaml"
    )
    dcgmi = {"output": (DCGM / "pass-3.1.0.txt").read_text(), "exit": 0, "hang": 0}
    (node.state_dir / "dcgmi.json").write_text(json.dumps(dcgmi))
    partitions.set_scenario_key(node, "busbw_gbps", busbw)


def audit_trail(proc, name: str) -> list[str]:
    audits = [
        json.loads(line[line.index("{") :])
        for line in proc.log.read_text().splitlines()
        if '"audit": true' in line
    ]
    return [a["what"] for a in audits if a["node"] == name]


def test_a_node_40_percent_below_its_profile_climbs_past_reboot(bench):
    b = bench(1)
    node = b.fleet.node(1)
    burnin_node(node, 300 * 0.6)
    ctlenv.xid79(node)  # fails `fleetmedic check` until a reboot
    name = f"{b.pool}-1"
    b.make_nodes([name], [node.address], taints=[ctlenv.repair_taint("reboot")], labels=INSTANCE)
    boots = node.boots
    cfg = b.config(ladder={"order": ["reboot", "manual"], "burnin": {"enabled": True}})
    proc = b.controller(cfg)
    port = yaml.safe_load(cfg.read_text())["metrics"]["port"]
    wait_state(b.kube, name, "manual", proc, 400)
    assert node.boots == boots + 1, "one reboot; verify passed after it"
    failed = history(b.kube, name)[0]
    assert (failed["step"], failed["result"], failed["phase"]) == ("reboot", "fail", "burnin")
    assert (
        "burn-in fail: all_reduce bus bandwidth 174.6 GB/s at 1 GiB on 2 GPUs, expected 300 "
        "GB/s (at least 240.0, 20% below)" in failed["message"]
    ), failed["message"]
    done = audit_trail(proc, name)
    assert done[:5] == ["diagnose", "drain", "reboot", "verify", "burnin"], done
    wait_until(
        lambda: ctlenv.scrape(port, 'fleetmedic_burnin_total{outcome="fail"}') == 1,
        30,
        "the scrape to count one failed burn-in",
    )
    # the result beside the episode's evidence bundles, where the escalation email finds it
    kept = list((b.dir / "ctl" / "evidence" / name).glob(f"{name}-e1-reboot1-*-burnin.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text())["result"] == "fail"


def test_a_node_at_its_profile_passes_the_gate_and_returns(bench):
    b = bench(1)
    node = b.fleet.node(1)
    burnin_node(node, 300)
    ctlenv.xid79(node)
    name = f"{b.pool}-1"
    b.make_nodes([name], [node.address], taints=[ctlenv.repair_taint("reboot")], labels=INSTANCE)
    cfg = b.config(ladder={"burnin": {"enabled": True}})
    proc = b.controller(cfg)
    wait_state(b.kube, name, "healthy", proc, 400)
    [attempt] = history(b.kube, name)
    assert (attempt["step"], attempt["result"], attempt["phase"]) == ("reboot", "pass", "burnin")
    assert (
        "burn-in passed: diag level 2 ok; all_reduce bus bandwidth 290.9 GB/s"
        in (attempt["message"])
    )
    assert audit_trail(proc, name) == ["diagnose", "drain", "reboot", "verify", "burnin"]
