"""The nspawn test fleet: real sshd nodes that really reboot, with Ansible's own modules.

Timings are printed (run with -s to see them) and kept in the final report.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.harness import fleet_net
from tests.harness.fleet import FleetError, attach, list_fleets, start_fleet
from tests.harness.fleet_ansible import hosts_with, run_ansible
from tests.harness.fleet_sys import (
    FLEETS_ROOT,
    cleanup_stale,
    fleets_lock,
    leftovers,
    mounts_under,
    proc_alive,
)

pytestmark = pytest.mark.fleet

REBOOT = [{"hosts": "node-2", "gather_facts": False, "tasks": [{"ansible.builtin.reboot": {}}]}]


def task_seconds(r) -> float:
    """How long the (only) task took, from ansible-runner's per-host result event."""
    ends = [
        e["event_data"]["duration"]
        for e in r.events
        if e.get("event") in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable")
    ]
    assert len(ends) == 1, ends
    return float(ends[0])


def test_three_nodes_boot_with_their_own_identity(fleet):
    assert [n.name for n in fleet] == ["node-1", "node-2", "node-3"]
    ids = set()
    for n in fleet:
        assert n.status()["state"] == "running"
        out = n.ssh(
            "hostname; cat /etc/machine-id /var/lib/dbus/machine-id; "
            "ip -4 -o addr show eth0; getent hosts $(hostname) | head -1; "
            "test -f /var/lib/fleetmedic-test/kern.log && echo state-ok"
        ).stdout.split("\n")
        assert out[0] == n.name
        assert out[1] == out[2] == n.machine_id
        assert f"inet {n.address}/24" in out[3]
        assert out[4].startswith("127.0.1.1")
        assert out[5] == "state-ok"
        ids.add(out[1])
    assert len(ids) == 3
    # the host-side state dir is the node's /var/lib/fleetmedic-test
    node = fleet.node(1)
    node.kern_log.write_text(
        "kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
    )
    assert "Xid" in node.ssh("cat /var/lib/fleetmedic-test/kern.log").stdout
    # the checkout's fleetmedic runs inside the node
    assert node.ssh("fleetmedic --version").stdout.startswith("fleetmedic")


def test_ansible_ping_reaches_all_nodes_with_host_key_checking(fleet):
    r = run_ansible(fleet, module="ping", timeout=120)
    assert r.rc == 0, r.stdout.read()
    assert set(r.stats["ok"]) == {"node-1", "node-2", "node-3"}
    common = yaml.safe_load(fleet.inventory.read_text())["all"]["vars"]["ansible_ssh_common_args"]
    assert f"UserKnownHostsFile={fleet.known_hosts}" in common
    assert "StrictHostKeyChecking=yes" in common and "StrictHostKeyChecking=no" not in common


def test_a_wrong_host_key_is_refused(fleet, tmp_path):
    # node-1's name and address listed with node-2's key: ssh must refuse node-1.
    lines = fleet.known_hosts.read_text().splitlines()
    bad = [lines[0].split()[0] + " " + " ".join(lines[1].split()[1:]), *lines[1:]]
    (tmp_path / "known_hosts").write_text("\n".join(bad) + "\n")
    inv = yaml.safe_load(fleet.inventory.read_text())
    inv["all"]["vars"]["ansible_ssh_common_args"] = inv["all"]["vars"][
        "ansible_ssh_common_args"
    ].replace(str(fleet.known_hosts), str(tmp_path / "known_hosts"))
    inv["all"]["vars"]["ansible_control_path_dir"] = str(tmp_path / "cp")  # no reused ssh masters
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inv))
    r = run_ansible(fleet, module="ping", timeout=120, inventory=tmp_path / "inventory.yml")
    assert hosts_with(r, "runner_on_unreachable") == {"node-1"}
    assert set(r.stats["ok"]) == {"node-2", "node-3"}
    # ansible-runner's own default (ANSIBLE_HOST_KEY_CHECKING=False) does not weaken it:
    # the inventory sets ansible_host_key_checking, which wins over the environment.
    r = run_ansible(
        fleet,
        module="ping",
        timeout=120,
        inventory=tmp_path / "inventory.yml",
        envvars={"ANSIBLE_HOST_KEY_CHECKING": "False"},
    )
    assert hosts_with(r, "runner_on_unreachable") == {"node-1"}


def test_ansible_reboot_gives_node2_a_new_boot_and_leaves_the_others(fleet):
    before = {n.name: n.boot_id() for n in fleet}
    boots = {n.name: n.boots for n in fleet}
    t0 = time.monotonic()
    r = run_ansible(fleet, playbook=REBOOT, timeout=300)
    took = time.monotonic() - t0
    print(
        f"\nTIMING ansible.builtin.reboot of node-2: task {task_seconds(r):.1f} s, "
        f"whole ansible-runner run {took:.1f} s"
    )
    assert r.rc == 0, r.stdout.read()
    assert set(r.stats["changed"]) == {"node-2"}
    after = {n.name: n.boot_id() for n in fleet}
    assert after["node-2"] != before["node-2"]
    assert {k: v for k, v in after.items() if k != "node-2"} == {
        k: v for k, v in before.items() if k != "node-2"
    }
    assert fleet.node(2).boots == boots["node-2"] + 1
    assert fleet.node(1).boots == boots["node-1"] and fleet.node(3).boots == boots["node-3"]


def test_a_node_that_never_returns_ends_unreachable_in_time(fleet_factory):
    """Within 2x reboot_timeout the host is out of the play, never hung.

    How it ends depends on pipelining (measured, ansible-core 2.19), so both run at once:
    node-1 without it (Ansible's default): the reboot action's own loop times out, then
    the task's remote-tmp cleanup fails to connect: **unreachable**. node-2 with it (this
    repo's ansible.cfg): nothing to clean up, the task **fails** with "Timed out waiting
    for last boot time check". Callers must treat both as "did not come back".
    """
    f = fleet_factory(2)
    for node in f:
        node.set_hang(True)
    reboot_timeout = 40
    play = [
        {
            "hosts": "all",
            "gather_facts": False,
            "vars": {"ansible_pipelining": "{{ inventory_hostname == 'node-2' }}"},
            "tasks": [{"ansible.builtin.reboot": {"reboot_timeout": reboot_timeout}}],
        }
    ]
    t0 = time.monotonic()
    r = run_ansible(f, playbook=play, timeout=6 * reboot_timeout)
    took = time.monotonic() - t0
    durations = {
        e["event_data"]["host"]: (e["event"], float(e["event_data"]["duration"]))
        for e in r.events
        if e.get("event") in ("runner_on_failed", "runner_on_unreachable")
    }
    print(
        f"\nTIMING reboot of nodes that never return (reboot_timeout={reboot_timeout}): "
        f"{durations}, whole run {took:.1f} s, rc {r.rc}"
    )
    assert r.status != "timeout", "ansible-runner's backstop fired: the task itself hung"
    assert durations["node-1"][0] == "runner_on_unreachable" and r.rc == 4
    assert durations["node-2"][0] == "runner_on_failed"
    failed = [
        e["event_data"]["res"]["msg"] for e in r.events if e.get("event") == "runner_on_failed"
    ]
    assert "Timed out waiting for last boot time check" in failed[0]
    assert all(d < 2 * reboot_timeout for _, d in durations.values())
    assert all(n.status()["state"] == "hung" for n in f)
    # released, a node boots again (a new boot)
    f.node(1).set_hang(False)
    f.node(1).wait_ssh(30)
    assert f.node(1).boots == 2


def test_faults_link_down_slow_boot_and_throttle(fleet_factory):
    f = fleet_factory(2)
    n1, n2 = f.node(1), f.node(2)
    # link down: the node is unreachable, then back
    n1.link_down()
    with pytest.raises(FleetError):
        n1.ssh("true", timeout=15)
    n1.link_up()
    assert n1.ssh("echo up").stdout.strip() == "up"
    # slow boot: the next boot waits
    n2.set_boot_delay(3)
    old = n2.boot_id()
    t0 = time.monotonic()
    n2.ssh("systemctl reboot", check=False)
    time.sleep(0.5)
    n2.wait_ssh(30)
    assert time.monotonic() - t0 >= 3
    assert n2.boot_id() != old
    # throttle: tbf on both directions, measured with iperf3 between the nodes
    n2.ssh("iperf3 -s -1 -D")
    n1.throttle("2mbit")
    time.sleep(0.3)
    res = n1.ssh("iperf3 -c node-2 -t 2 -J", timeout=30).stdout
    mbit = json.loads(res)["end"]["sum_received"]["bits_per_second"] / 1e6
    assert mbit < 3, f"throttled link carried {mbit:.1f} Mbit/s"
    f.reset_faults()
    assert (
        "tbf"
        not in subprocess.run(
            ["tc", "qdisc", "show", "dev", n1.veth], capture_output=True, text=True
        ).stdout
    )


def _fleet_pids(f) -> set[int]:
    pids = set()
    for n in f:
        pids |= set(fleet_net.netns_pids(n.netns))
    sup = f.record()["supervisor"]
    return pids | {sup["pid"]}


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _assert_gone(f, rec: dict, pids: set[int]) -> None:
    assert leftovers(f.dir, rec) == []
    all_ns = fleet_net.list_netns()
    assert not [n.netns for n in f if n.netns in all_ns]
    assert f.bridge not in fleet_net.list_links()
    assert not mounts_under(f.dir)
    assert str(f.dir) not in Path("/proc/self/mountinfo").read_text()
    still = [p for p in pids if _running(p)]
    assert still == [], f"processes left: {still}"


def test_teardown_leaves_no_netns_bridge_mount_or_process():
    f = start_fleet(2, prefix="pytest")
    try:
        f.node(1).ssh("sleep 1000 >/dev/null 2>&1 &")  # a stray process inside a node
        rec = f.record()
        pids = _fleet_pids(f)
        assert len(pids) > 4  # supervisor + each node's init, sshd, journald...
    finally:
        f.down()
    _assert_gone(f, rec, pids)


def _owned_fleet_in_subprocess(then: str) -> tuple[subprocess.Popen, str]:
    """A stand-in for a pytest run: a process that starts an owned 1-node fleet."""
    code = (
        "import os, signal, sys, time; from tests.harness.fleet import start_fleet; "
        "f = start_fleet(1, prefix='pytest'); print(f.name, flush=True); " + then
    )
    root = Path(__file__).resolve().parents[2]
    p = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    name = p.stdout.readline().strip()
    assert name, p.stderr.read()
    return p, name


def test_a_killed_test_run_leaves_nothing_behind():
    # The owner is SIGKILLed: the fleet's supervisor notices and tears the fleet down.
    p, name = _owned_fleet_in_subprocess("time.sleep(2); os.kill(os.getpid(), signal.SIGKILL)")
    d = FLEETS_ROOT / name
    rec = attach(name).record()
    assert p.wait(60) == -9
    deadline = time.monotonic() + 40
    while leftovers(d, rec) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftovers(d, rec) == []


def test_a_crashed_run_is_swept_by_the_next_start():
    # Owner and supervisor both SIGKILLed: nodes, netns, bridge and mounts stay behind
    # until the next start (or `cleanup`) sweeps them.
    p, name = _owned_fleet_in_subprocess("time.sleep(600)")
    d = FLEETS_ROOT / name
    f = attach(name)
    rec = f.record()
    container_pids = set(fleet_net.netns_pids(f.node(1).netns))
    os.kill(rec["supervisor"]["pid"], signal.SIGKILL)
    p.kill()
    p.wait(10)
    time.sleep(0.5)
    assert any(x.startswith("netns") for x in leftovers(d, rec))  # really left behind
    with fleets_lock():
        removed = cleanup_stale()
    assert f"fleet {name}" in removed
    _assert_gone(f, rec, container_pids)


def test_fleet_shaped_network_leftovers_are_swept():
    with fleets_lock():
        used = set(fleet_net.ours_links().values()) | {r["octet"] for r in list_fleets()}
        octet = max(set(fleet_net.OCTETS) - used)
        fleet_net.create_bridge(octet)
        fleet_net.create_node_net(octet, 1, "node-1")
        removed = cleanup_stale()
    assert f"netns {fleet_net.netns_name(octet, 'node-1')}" in removed
    assert fleet_net.netns_name(octet, "node-1") not in fleet_net.list_netns()
    assert fleet_net.bridge_name(octet) not in fleet_net.list_links()
    assert fleet_net.veth_name(octet, 1) not in fleet_net.list_links()


def test_a_node_that_misses_sshd_fails_in_one_line_and_keeps_its_logs():
    with pytest.raises(FleetError) as err:
        start_fleet(1, prefix="pytest", boot_timeout=0.0)
    msg = str(err.value)
    assert "\n" not in msg
    assert "node-1 did not reach sshd within 0 s; console log at " in msg
    console = Path(msg.rsplit(" ", 1)[1])
    d = console.parents[2]
    try:
        assert console.exists()
        rec = json.loads((d / "fleet.json").read_text())
        assert rec["state"] == "failed"
        assert leftovers(d, rec) == [f"dir {d}"]  # only the logs stay
        kept = sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())
        assert set(kept) <= {
            "fleet.json",
            "supervisor.log",
            "nodes/node-1/console.log",
            "nodes/node-1/boots.log",
            "nodes/node-1/status.json",
        }
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_cli_up_status_down(tmp_path):
    root = Path(__file__).resolve().parents[2]
    name = "pytest-cli"

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "tests.harness.fleet", *args, "--name", name],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=120,
        )

    try:
        up = cli("up", "-n", "2")
        assert up.returncode == 0, up.stderr
        assert f"{FLEETS_ROOT / name / 'inventory.yml'}" in up.stdout
        f = attach(name)
        assert f.status()["owner"] is None  # stays up after the CLI exits
        again = cli("up", "-n", "2")  # idempotent
        assert again.returncode == 0 and "2 nodes" in again.stdout
        st = cli("status")
        assert st.stdout.count("running") == 2
        # the written inventory works with plain ansible (Molecule uses it the same way)
        env_bin = str(Path(sys.executable).parent)
        ping = subprocess.run(
            [f"{env_bin}/ansible", "-i", str(f.inventory), "all", "-m", "ping"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=120,
            env={
                "PATH": f"{env_bin}:/usr/sbin:/usr/bin:/sbin:/bin",
                "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
                "HOME": "/root",
            },
        )
        assert ping.returncode == 0, ping.stdout + ping.stderr
        rec = f.record()
    finally:
        down = cli("down")
    assert down.returncode == 0, down.stderr
    assert leftovers(FLEETS_ROOT / name, rec) == []
    assert not proc_alive(rec["supervisor"]["pid"], rec["supervisor"]["start"])
