"""The inventory, known_hosts-facing ssh options and names the fleet harness writes
(no root, no nodes: the writer runs on a Fleet object in a temp dir)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.harness import fleet_net as net
from tests.harness import loadscale
from tests.harness.fleet import ROOT, Fleet, Node, _write_inventory


@pytest.fixture
def fleet(tmp_path):
    f = Fleet(name="unit", dir=tmp_path, octet=247)
    f.nodes = [
        Node(
            fleet=f,
            name=f"node-{i}",
            index=i,
            address=net.node_address(247, i),
            netns=net.netns_name(247, f"node-{i}"),
            veth=net.veth_name(247, i),
            machine_id="0" * 32,
        )
        for i in (1, 2, 3)
    ]
    _write_inventory(f)
    return f


def test_inventory_has_what_ansible_and_molecule_need(fleet):
    inv = yaml.safe_load(fleet.inventory.read_text())["all"]
    assert inv["hosts"]["node-2"]["ansible_host"] == "192.168.247.12"
    v = inv["vars"]
    assert v["ansible_user"] == "root"
    assert v["ansible_ssh_private_key_file"] == str(fleet.private_key)
    assert v["ansible_host_key_checking"] is True
    args = v["ansible_ssh_common_args"]
    assert f"-o UserKnownHostsFile={fleet.known_hosts}" in args
    assert "-o StrictHostKeyChecking=yes" in args and "StrictHostKeyChecking=no" not in args
    assert "-o ServerAliveInterval=3" in args and "-o ServerAliveCountMax=2" in args
    assert v["ansible_control_path_dir"].startswith(str(fleet.dir))


def test_ssh_options_check_host_keys(fleet):
    opts = " ".join(fleet.ssh_options())
    assert f"UserKnownHostsFile={fleet.known_hosts}" in opts
    assert "StrictHostKeyChecking=yes" in opts and "BatchMode=yes" in opts
    cfg = fleet.ssh_config.read_text()
    assert "Host node-3\n  HostName 192.168.247.13" in cfg and "StrictHostKeyChecking yes" in cfg


def test_ansible_inventory_parses_it(fleet):
    bindir = Path(sys.executable).parent
    out = subprocess.run(
        [str(bindir / "ansible-inventory"), "-i", str(fleet.inventory), "--list"],
        capture_output=True,
        text=True,
        timeout=loadscale.guard(60),
        cwd=ROOT,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
    )
    assert out.returncode == 0, out.stderr
    assert "192.168.247.11" in out.stdout


def test_names_fit_linux_limits_and_sweep_patterns():
    for octet in net.OCTETS:
        for i in (1, 200):
            assert len(net.veth_name(octet, i)) <= 15
            assert net._LINK_RE.match(net.veth_name(octet, i))
        assert len(net.bridge_name(octet)) <= 15
        assert net._LINK_RE.match(net.bridge_name(octet)).group(1) == str(octet)
        assert net._NETNS_RE.match(net.netns_name(octet, "node-7")).group(1) == str(octet)
    assert not net._LINK_RE.match("eth0") and not net._LINK_RE.match("fmtest0")
    assert net.node_address(240, 1) == "192.168.240.11" and net.host_address(240) == "192.168.240.1"


def test_node_lookup(fleet):
    assert fleet.node(2) is fleet.node("2") is fleet.node("node-2")
    with pytest.raises(Exception, match="no node"):
        fleet.node(9)
