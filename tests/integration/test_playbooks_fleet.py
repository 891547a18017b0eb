"""The playbooks as an on-call engineer runs them: ``ansible-playbook -i <k8s_nodes
inventory> playbooks/X.yml --limit NODE``, against the nspawn test fleet (real sshd, real
reboots) mapped to kwok Nodes on the real API server.

Each fleet node gets a Node named ``pb-<run>-node-N`` whose InternalIP is the fleet
node's address, so the k8s_nodes plugin puts the SSH address in ``ansible_host``. The
fleet's SSH settings (key, known_hosts, ServerAlive) are group_vars next to the inventory
file, as an operator's would be; host key checking stays on.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest

from fleetmedic.model.vocabulary import preset
from tests.harness.adhoc import BROKEN, CHECK, HEALTHY, cli_env, make_inventory, playbook, recap

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]


@pytest.fixture(scope="module")
def k8s_fleet(kube, fleet, tmp_path_factory):
    """The shared 3-node fleet as kwok Nodes (nvidia, no taints yet) plus an inventory dir."""
    run = uuid.uuid4().hex[:6]
    prefix = f"pb-{run}"
    names = {n.index: f"{prefix}-{n.name}" for n in fleet}
    kube.make_nodes(
        list(names.values()),
        labels={"fleetmedic-test/pb": run, "fleetmedic.io/gpu-vendor": "nvidia"},
        addresses={names[n.index]: n.address for n in fleet},
    )
    src = make_inventory(kube, fleet, tmp_path_factory.mktemp("inv"), run, prefix)
    for n in fleet:
        (n.state_dir / "nvml.json").write_text(json.dumps(HEALTHY))
    yield {"names": names, "inventory": src, "run": run}
    kube.delete_nodes(names.values())
    for n in fleet:
        (n.state_dir / "nvml.json").unlink(missing_ok=True)


def set_taints(kube, name: str, taints: list[dict]) -> None:
    node = kube.request("GET", f"/api/v1/nodes/{name}")
    node["spec"]["taints"] = taints
    kube.request("PUT", f"/api/v1/nodes/{name}", node)


def test_reboot_playbook_really_reboots_the_tainted_node(kube, fleet, k8s_fleet, tmp_path):
    names = k8s_fleet["names"]
    set_taints(kube, names[2], [preset("default").reboot.as_taint()])
    graph = subprocess.run(
        ["ansible-inventory", "-i", str(k8s_fleet["inventory"]), "--graph"],
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=ROOT,
        check=True,
    ).stdout
    assert names[2] in graph.split("@repair_reboot:")[1].split("@")[0], graph

    before = {i: fleet.node(i).boot_id() for i in (1, 2, 3)}
    (fleet.node(2).kern_log).write_text(
        "2026-11-21T10:00:00.000000+00:00 node-2 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.\n"
    )
    p = playbook(
        k8s_fleet["inventory"],
        "reboot.yml",
        "--limit",
        names[2],
        extravars={
            "diagnostics_fetch_dir": str(tmp_path / "evidence"),
            "diagnostics_kernel_log_files": ["/var/lib/fleetmedic-test/kern.log"],
            "diagnostics_check_command": CHECK,
            "gpu_health_command": CHECK,
            "reboot_timeout": 120,
            "reboot_verify_delay": 2,
        },
    )
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    after = {i: fleet.node(i).boot_id() for i in (1, 2, 3)}
    assert after[2] != before[2], "node 2 did not reboot"
    assert after[1] == before[1] and after[3] == before[3], "other nodes were touched"
    assert recap(p.stdout)[names[2]]["failed"] == 0
    assert f"{names[2]} is healthy" in p.stdout
    lease = kube.request(
        "GET",
        f"/apis/coordination.k8s.io/v1/namespaces/fleetmedic/leases/fleetmedic-node-{names[2]}",
    )
    assert lease["spec"].get("acquireTime") and lease["spec"].get("holderIdentity") is None, (
        "the run held the node's Lease and gave it back"
    )

    bundles = list((tmp_path / "evidence" / names[2]).glob(f"{names[2]}-*.tar.gz"))
    assert len(bundles) == 1
    with tarfile.open(bundles[0]) as tar:
        members = tar.getnames()
        top = members[0].split("/")[0]
        kern = tar.extractfile(f"{top}/files/var_lib_fleetmedic-test_kern.log").read().decode()
        node = json.load(tar.extractfile(f"{top}/node.json"))
    assert "Xid (PCI:0000:18:00): 79" in kern
    assert node["state"] == "reboot" and node["taints"] == [preset("default").reboot.as_taint()]
    print(f"reboot.yml with evidence and verify: {p.seconds:.1f} s")


def test_verify_playbook_fails_only_the_unhealthy_node_with_a_readable_message(fleet, k8s_fleet):
    names = k8s_fleet["names"]
    fleet.node(3).state_dir.joinpath("nvml.json").write_text(json.dumps(BROKEN))
    try:
        p = playbook(
            k8s_fleet["inventory"],
            "verify.yml",
            "--limit",
            f"{names[1]},{names[3]}",
            extravars={"gpu_health_command": CHECK},
        )
    finally:
        fleet.node(3).state_dir.joinpath("nvml.json").write_text(json.dumps(HEALTHY))
    assert p.returncode == 2, p.stdout[-3000:]
    counts = recap(p.stdout)
    assert counts[names[1]]["failed"] == 0 and counts[names[3]]["failed"] == 1
    line = next(
        line for line in (p.stdout + p.stderr).splitlines() if f"{names[3]} is not healthy" in line
    )
    assert "problem" in line and "nvidia.ecc" in line, line


def test_destructive_playbooks_refuse_to_run_on_the_whole_inventory(k8s_fleet):
    for book in ("reboot.yml", "reimage.yml", "reset.yml"):
        p = playbook(k8s_fleet["inventory"], book)
        assert p.returncode != 0
        assert "refusing to" in p.stdout and "--limit" in p.stdout, p.stdout[-2000:]


def test_reimage_without_a_vendor_says_what_to_set(kube, k8s_fleet):
    names = k8s_fleet["names"]
    node = kube.request("GET", f"/api/v1/nodes/{names[1]}")
    del node["metadata"]["labels"]["fleetmedic.io/gpu-vendor"]
    kube.request("PUT", f"/api/v1/nodes/{names[1]}", node)
    try:
        p = playbook(k8s_fleet["inventory"], "reimage.yml", "--limit", names[1])
    finally:
        node = kube.request("GET", f"/api/v1/nodes/{names[1]}")
        node["metadata"]["labels"]["fleetmedic.io/gpu-vendor"] = "nvidia"
        kube.request("PUT", f"/api/v1/nodes/{names[1]}", node)
    assert p.returncode == 2
    assert "GPU vendor is 'unknown'" in p.stdout and "fleetmedic.io/gpu-vendor" in p.stdout, (
        p.stdout[-2000:]
    )


def test_a_node_that_never_comes_back_is_unreachable_in_bounded_time(kube, fleet_factory, tmp_path):
    """ServerAlive options and reboot_timeout bound the reboot: the host ends failed ("Timed
    out waiting for last boot time check", with pipelining) or unreachable (without), never
    hangs. ansible-playbook exits 2 or 4."""
    lone = fleet_factory(1)
    run = uuid.uuid4().hex[:6]
    name = f"pb-{run}-hang"
    kube.make_nodes(
        [name],
        labels={"fleetmedic-test/pb": run, "fleetmedic.io/gpu-vendor": "nvidia"},
        addresses=[lone.node(1).address],
        taints=[preset("default").reboot.as_taint()],
    )
    try:
        inv = make_inventory(kube, lone, tmp_path / "inv", run, f"pb-{run}")
        lone.node(1).set_hang(True)
        timeout = 20
        p = playbook(
            inv,
            "reboot.yml",
            "--limit",
            name,
            extravars={"fleetmedic_collect_evidence": False, "reboot_timeout": timeout},
            timeout=300,
        )
        assert p.returncode in (2, 4), p.stdout[-3000:]
        counts = recap(p.stdout)[name]
        assert counts["failed"] + counts["unreachable"] == 1
        assert (
            "Timed out waiting for last boot time check" in p.stdout or counts["unreachable"] == 1
        )
        assert p.seconds < 2 * timeout + 30, f"took {p.seconds:.0f} s"
        print(
            f"never-return reboot ended (rc {p.returncode}) after {p.seconds:.1f} s (reboot_timeout {timeout})"
        )
    finally:
        lone.node(1).set_hang(False)
        kube.delete_nodes([name])
