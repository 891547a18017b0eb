"""Ad-hoc playbook runs and the controller share the per-node Lease, so they never work on
the same node at once (real API server, real nspawn node that reboots, the real controller).

- An ad-hoc ``ansible-playbook reboot.yml --limit NODE`` takes the node's Lease for the whole
  run and gives it back. A controller that finds the node in repair meanwhile waits: it does
  not cordon or drain the node until the ad-hoc run has ended, then repairs it.
- An ad-hoc run on a node whose Lease the controller holds fails at once, names the holder,
  reboots nothing and leaves the controller's Lease alone.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from fleetmedic.adapters.kube import connect
from fleetmedic.adapters.lease import Lease, node_lease_name
from tests.harness import ctlenv
from tests.harness.adhoc import cli_env
from tests.harness.ctlbench import fast_config
from tests.harness.ctlenv import history, state_of, wait_until

pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
LEASES = "kube-system"  # ctlenv.write_config puts the test controllers' Leases there
QUICK_REBOOT = {
    "fleetmedic_collect_evidence": False,
    "reboot_verify": False,
    "fleetmedic_lease_namespace": LEASES,
}


def inventory(b, directory: Path) -> Path:
    """An operator's k8s_nodes inventory of the bench's pool, with the fleet's SSH settings."""
    (directory / "group_vars").mkdir(parents=True, exist_ok=True)
    fleet_vars = yaml.safe_load(b.fleet.inventory.read_text())["all"]["vars"]
    (directory / "group_vars" / "all.yml").write_text(yaml.safe_dump(fleet_vars))
    src = directory / "pool.k8s_nodes.yml"
    src.write_text(
        yaml.safe_dump(
            {
                "plugin": "fleetmedic.fleet.k8s_nodes",
                "kubeconfig": str(b.kube.kubeconfig),
                "label_selector": f"{ctlenv.POOL_LABEL}={b.pool}",
            }
        )
    )
    return src


def reboot_cmd(inv: Path, name: str, extra: dict) -> list[str]:
    return [
        "ansible-playbook",
        "-i",
        str(inv),
        str(ROOT / "playbooks" / "reboot.yml"),
        "--limit",
        name,
        "-e",
        json.dumps(extra),
    ]


def lease_holder(kube, name: str) -> str | None:
    lease = kube.request(
        "GET",
        f"/apis/coordination.k8s.io/v1/namespaces/{LEASES}/leases/{node_lease_name(name)}",
        ok=(404,),
    )
    return (lease.get("spec") or {}).get("holderIdentity")


def test_the_controller_waits_for_an_ad_hoc_run_then_repairs(safety_bench, tmp_path):
    b = safety_bench(1, tag="adh")
    [name] = b.register()
    node = b.fleet.node(1)
    boot = node.boot_id()
    adhoc = subprocess.Popen(
        reboot_cmd(
            inventory(b, tmp_path / "inv"), name, {**QUICK_REBOOT, "reboot_post_reboot_delay": 12}
        ),
        env=cli_env(),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(
            lambda: (
                adhoc.poll() is None
                and (lease_holder(b.kube, name) or "").startswith("ansible-playbook")
            ),
            60,
            "the ad-hoc run to take the node's Lease",
        )
        # meanwhile the agent fences the node and a controller is running
        ctlenv.set_taints(b.kube, name, lambda t: [*t, ctlenv.repair_taint("reboot")])
        proc = b.controller(fast_config(b, b.dir))
        cordoned_while_held = []
        done = threading.Event()

        def watch_cordon():
            # Node first, then the Lease: a cordon seen while the ad-hoc run still holds
            # the Lease afterwards was certainly made while it held it. (The ad-hoc run
            # gives the Lease back before its process ends; a cordon after that is fine.)
            while not done.is_set():
                cordoned = ctlenv.node(b.kube, name)["spec"].get("unschedulable")
                held = (lease_holder(b.kube, name) or "").startswith("ansible-playbook")
                if cordoned and held:
                    cordoned_while_held.append(time.monotonic())
                done.wait(0.2)

        watcher = threading.Thread(target=watch_cordon)
        watcher.start()
        wait_until(
            lambda: "node Lease held by ansible-playbook" in proc.log.read_text(),
            30,
            "the controller to find the node's Lease taken",
        )
        out, _ = adhoc.communicate(timeout=240)
        done.set()
        watcher.join()
    finally:
        if adhoc.poll() is None:
            adhoc.kill()
    assert adhoc.returncode == 0, out[-4000:]
    assert node.boot_id() != boot, "the ad-hoc run rebooted the node"
    assert not cordoned_while_held, "the controller drained the node while the ad-hoc run held it"
    assert not (lease_holder(b.kube, name) or "").startswith("ansible-playbook"), "given back"

    def repaired():
        assert proc.alive, proc.tail()
        return state_of(b.kube, name) == "healthy" and history(b.kube, name)

    wait_until(repaired, 120, "the controller to repair the node after the ad-hoc run")
    assert [(a["step"], a["result"]) for a in history(b.kube, name)] == [("reboot", "pass")]


def test_an_ad_hoc_run_on_a_node_the_controller_holds_fails_at_once(safety_bench, tmp_path):
    b = safety_bench(1, tag="adf")
    [name] = b.register()
    node = b.fleet.node(1)
    boot = node.boot_id()
    held = Lease(
        connect(str(b.kube.kubeconfig)), LEASES, node_lease_name(name), "bastion-2-4242", 120
    )
    assert held.try_acquire()
    inv = inventory(b, tmp_path / "inv")
    t0 = time.monotonic()
    p = subprocess.run(
        reboot_cmd(inv, name, QUICK_REBOOT),
        env=cli_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    took = time.monotonic() - t0
    assert p.returncode == 2, p.stdout[-3000:]
    assert f"node {name} is being worked on" in p.stdout and "held by bastion-2-4242" in p.stdout, (
        p.stdout[-3000:]
    )
    assert node.boot_id() == boot, "nothing was rebooted"
    assert held.current_holder() == "bastion-2-4242", "someone else's Lease is left alone"
    print(f"ad-hoc run refused in {took:.1f} s")

    held.release()
    p = subprocess.run(
        reboot_cmd(inv, name, QUICK_REBOOT),
        env=cli_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout[-3000:]
    assert node.boot_id() != boot
    lease = b.kube.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{LEASES}/leases/{node_lease_name(name)}"
    )
    assert lease["spec"].get("holderIdentity") is None, "the ad-hoc run gave its Lease back"
    assert lease["spec"]["leaseTransitions"] >= 1, "it had taken it over from the controller"
