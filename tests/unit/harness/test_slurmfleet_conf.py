"""The Slurm fleet's configuration and boots, without starting anything: its slurm.conf
differs from the bare cluster's only in slurmd's own files and the reboot settings; the
bare cluster (whose slurmd run on this host) never gets a RebootProgram; a node with a
boot time of its own boots under ``unshare --time``."""

from __future__ import annotations

from pathlib import Path

from tests.harness import fleet_supervisor
from tests.harness.fleet import Fleet, Node
from tests.harness.slurm import SlurmCluster
from tests.harness.slurmfleet import REBOOT_PROGRAM, FleetCluster


def _fleet() -> Fleet:
    f = Fleet(name="sfleet-1-1", dir=Path("/run/fleetmedic/fleets/sfleet-1-1"), octet=243)
    f.nodes = [
        Node(f, f"node-{i}", i, f"192.168.243.{10 + i}", f"fm243-node-{i}", f"fm243v{i}", "x")
        for i in (1, 2)
    ]
    return f


def _clusters() -> tuple[SlurmCluster, FleetCluster]:
    d = Path("/run/fleetmedic/slurm/sfleet-1-1")
    bare = SlurmCluster("sfleet-1-1", d, 243, ["node-1", "node-2"], ctld_port=7000)
    fc = FleetCluster("sfleet-1-1", d, 243, ["node-1", "node-2"], ctld_port=7000, fleet=_fleet())
    return bare, fc


def test_the_bare_cluster_never_reboots_anything():
    bare, _ = _clusters()
    assert "RebootProgram" not in bare.slurm_conf()  # its slurmd run on this very host


def test_fleet_conf_is_the_bare_conf_but_slurmd_files_and_reboots():
    bare, fc = _clusters()
    only_bare = set(bare.slurm_conf().splitlines()) - set(fc.slurm_conf().splitlines())
    only_fleet = set(fc.slurm_conf().splitlines()) - set(bare.slurm_conf().splitlines())
    assert {ln.split("=")[0] for ln in only_bare} == {"SlurmdSpoolDir", "SlurmdPidFile"}
    assert {ln.split("=")[0] for ln in only_fleet} == {
        "SlurmdSpoolDir",
        "SlurmdPidFile",
        "SlurmdLogFile",
        "RebootProgram",
        "ResumeTimeout",
    }
    assert f"RebootProgram={REBOOT_PROGRAM}" in only_fleet
    # the fleet's addresses: nodes at their fleet address, slurmctld at the bridge's host end
    conf = fc.slurm_conf()
    assert "NodeName=node-2 NodeAddr=192.168.243.12 " in conf
    assert "(192.168.243.1)" in conf


def test_fleet_cluster_record_names_no_network_object():
    _, fc = _clusters()
    rec = fc._record()
    assert rec["netns"] == [] and rec["links"] == [] and rec["fleet"] == "sfleet-1-1"


def test_node_binds_are_the_config_the_munge_socket_and_its_gpus():
    _, fc = _clusters()
    binds = fc.node_binds("node-2")
    assert f"--bind-ro={fc.conf}:/etc/slurm/slurm.conf" in binds
    assert f"--bind-ro={fc.munge_socket.parent}" in binds
    assert f"--bind-ro={fc.dir / 'dev' / 'node-2'}" in binds
    assert not any("node-1" in b for b in binds)


def _loop(**node) -> fleet_supervisor.NodeLoop:
    fleet = {"dir": "/tmp/f", "checkout": "/nonexistent", "octet": 243}
    rec = {"name": "node-1", "netns": "fm243-node-1", "machine_id": "x", **node}
    return fleet_supervisor.NodeLoop(fleet, rec, stop=None)  # type: ignore[arg-type]


def test_a_plain_node_boots_as_before():
    cmd = _loop().command()
    assert cmd[0] == "systemd-nspawn"


def test_a_node_with_its_own_boot_time_boots_in_a_time_namespace():
    cmd = _loop(fresh_boottime=True, nspawn_args=["--bind-ro=/a"]).command()
    assert cmd[:2] == ["unshare", "--time"]
    offset = int(cmd[2].removeprefix("--boottime="))
    host_uptime = float(Path("/proc/uptime").read_text().split()[0])
    assert -host_uptime <= offset <= -host_uptime + 1  # the clock starts near 0, never below
    assert cmd[3] == "systemd-nspawn" and cmd[-1] == "--bind-ro=/a"


def test_a_tests_own_lines_reach_the_fleet_conf():
    _, fc = _clusters()
    fc.extra_conf = "Prolog=/usr/local/sbin/fleetmedic-slurm-check"
    assert fc.slurm_conf().rstrip().endswith("Prolog=/usr/local/sbin/fleetmedic-slurm-check")
