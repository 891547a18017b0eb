"""The return gate's restore through the controller: kwok Nodes mapped onto fleet nodes
that really reboot, real Ansible, ``fleetmedic run`` as a subprocess (SIGKILLed in one
test). The GPUs are the fakes: MIG state belongs to the boot that made it, so the reboot
rung really loses the layout the diagnose phase recorded, and the restore phase puts it
back with the fake nvidia-mig-parted."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.harness import ctlenv, partitions
from tests.harness.ctlbench import Benches, pool_name
from tests.harness.ctlenv import annotation, cli, history, wait_state, wait_until

pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]


@pytest.fixture
def bench(kube, fleet_factory, tmp_path):
    benches = Benches(kube, fleet_factory, tmp_path)
    yield lambda nodes=1: benches.new(nodes, pool_name("pt"))
    benches.stop_controllers(log_lines=80)
    benches.delete_nodes()


def test_a_mig_node_fenced_for_xid79_is_rebooted_and_returns_with_its_instances(bench):
    b = bench(1)
    node = b.fleet.node(1)
    partitions.mig(node)
    before = partitions.mig_devices(node)
    assert len(before) == 4 and all("MIG 3g.40gb" in d for d in before)
    ctlenv.xid79(node)  # fails `fleetmedic check` until a reboot
    [name] = b.register({1: [ctlenv.repair_taint("reboot")]})
    boots = node.boots
    cfg = b.config()
    proc = b.controller(cfg)
    port = yaml.safe_load(cfg.read_text())["metrics"]["port"]
    wait_state(b.kube, name, "healthy", proc, 300)
    assert node.boots == boots + 1, "one reboot"
    assert partitions.mig_devices(node) == before, "the same instances, the same MIG UUIDs"
    assert partitions.mig_parted_applies(node) == [True]
    rec = annotation(b.kube, name, "fleetmedic.io/partition-layout")
    assert rec["ep"] == 1 and rec["layout"]["partitioned"] is True
    assert rec["summary"] == "GPU 0: MIG 3g.40gb x2; GPU 1: MIG 3g.40gb x2"
    [attempt] = history(b.kube, name)
    assert (attempt["step"], attempt["result"], attempt["phase"]) == ("reboot", "pass", "verify")
    assert (
        "restore: applied; before: GPU 0: MIG off; GPU 1: MIG off; "
        "after: GPU 0: MIG 3g.40gb x2; GPU 1: MIG 3g.40gb x2" in attempt["message"]
    )
    wait_until(
        lambda: ctlenv.scrape(port, 'fleetmedic_partition_restores_total{outcome="ok"}') == 1,
        30,
        "the scrape to count one restore",
    )
    audits = [
        json.loads(line[line.index("{") :])
        for line in proc.log.read_text().splitlines()
        if '"audit": true' in line
    ]
    done = [a["what"] for a in audits if a["node"] == name]
    assert done == ["diagnose", "drain", "reboot", "restore", "verify"], done


def test_a_restore_that_fails_climbs_the_ladder(bench):
    b = bench(1)
    node = b.fleet.node(1)
    why = "error applying MIG configuration: GPU 0: MIG mode change refused"
    partitions.mig(node, fail={"nvidia-mig-parted apply": why})
    ctlenv.xid79(node)
    [name] = b.register({1: [ctlenv.repair_taint("reboot")]})
    cfg = b.config(ladder={"order": ["reboot", "manual"]})
    proc = b.controller(cfg)
    wait_state(b.kube, name, "manual", proc, 300)
    failed = history(b.kube, name)[0]
    assert (failed["step"], failed["result"], failed["phase"]) == ("reboot", "fail", "restore")
    assert why in failed["message"]
    assert partitions.mig_parted_applies(node) == []  # refused: nothing changed
    status = cli(cfg, "status", "--json")
    [row] = json.loads(status.stdout)
    assert row["state"] == "manual"


def test_a_controller_killed_during_restore_resumes_without_applying_twice(bench):
    b = bench(1)
    node = b.fleet.node(1)
    partitions.mig(node)
    before = partitions.mig_devices(node)
    ctlenv.xid79(node)
    [name] = b.register({1: [ctlenv.repair_taint("reboot")]})
    cfg = b.config()
    first = b.controller(cfg, 1)

    def restoring():
        fl = annotation(b.kube, name, "fleetmedic.io/in-flight") or {}
        return fl.get("phase") == "restore" and fl.get("status") == "running"

    wait_until(restoring, 240, "the restore phase to start", interval=0.1)
    status = cli(cfg, "status", "--json")
    [row] = json.loads(status.stdout)
    assert row["doing"].startswith("RESTORE: reboot#1 restore running"), row["doing"]
    first.kill9()
    second = b.controller(cfg, 2)
    wait_state(b.kube, name, "healthy", second, 240)
    assert partitions.mig_devices(node) == before
    assert partitions.mig_parted_applies(node) == [True], "one application of the layout"
    [attempt] = history(b.kube, name)
    assert (attempt["step"], attempt["result"]) == ("reboot", "pass")


def test_an_amd_node_through_a_reset_gets_its_cpx_nps4_back(bench):
    b = bench(1)
    node = b.fleet.node(1)
    check = ctlenv.CHECK_YAML.replace("vendor: nvidia", "vendor: amd")
    node.ssh(f"printf '%s' '{check}' > /etc/fleetmedic/check.yaml")
    partitions.amd(node, "CPX", "NPS4")
    name = f"{b.pool}-1"
    b.make_nodes(
        [name],
        [node.address],
        taints=[ctlenv.repair_taint("reset")],
        labels={"fleetmedic.io/gpu-vendor": "amd"},
    )
    boots = node.boots
    proc = b.controller(b.config())
    wait_state(b.kube, name, "healthy", proc, 300)
    assert node.boots == boots, "a reset, no reboot"
    gpus = json.loads((node.state_dir / "amd.json").read_text())["gpus"]
    assert [g.get("resets") for g in gpus] == [1, 1], "the reset went through the hive"
    assert [(g["compute_partition"], g["memory_partition"]) for g in gpus] == [("CPX", "NPS4")] * 2
    assert [g.get("driver_reloads") for g in gpus] == [1, 1], "one reload for the NPS4 change"
    [attempt] = history(b.kube, name)
    assert (attempt["step"], attempt["result"]) == ("reset", "pass")
    assert "before: GPU 0: SPX/NPS1; GPU 1: SPX/NPS1; after: GPU 0: CPX/NPS4" in attempt["message"]
