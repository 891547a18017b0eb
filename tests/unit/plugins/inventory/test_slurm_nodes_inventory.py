"""Unit tests for the fleetmedic.fleet.slurm_nodes inventory plugin.

As for k8s_nodes: the plugin is loaded through Ansible's own plugin loader (so its
DOCUMENTATION really defines the options), a config file is written, and node dicts in
sinfo --json's shape are fed in by replacing only the plugin's data source,
``_list_nodes``. The real slurmctld is exercised in
tests/integration/test_inventory_slurm_nodes.py.
"""

from __future__ import annotations

import pathlib

import pytest
import yaml
from ansible.errors import AnsibleError
from ansible.inventory.data import InventoryData
from ansible.parsing.dataloader import DataLoader

ROOT = pathlib.Path(__file__).resolve().parents[4]
NAME = "fleetmedic.fleet.slurm_nodes"


@pytest.fixture
def plugin():
    from ansible.plugins.loader import init_plugin_loader, inventory_loader
    from ansible.utils.collection_loader import AnsibleCollectionConfig

    if AnsibleCollectionConfig.collection_finder is None:
        init_plugin_loader([str(ROOT / "collections")])
    return inventory_loader.get(NAME)


def node(name, reason="", state="idle", flags=(), partitions=("gpu",), extra=""):
    return {
        "name": name,
        "state": state,
        "state_flags": list(flags),
        "reason": reason,
        "reason_set_by_user": "root" if reason else None,
        "reason_changed_at": 1795723133 if reason else 0,
        "partitions": list(partitions),
        "extra": extra,
        "boot_time": 1795711159,
        "address": f"10.0.0.{name[-1]}",
    }


NODES = [
    node("n1", "fleetmedic: reboot: xid 79", flags=["DRAIN"]),
    node("n2", "NHC: check_hw_gpu", flags=["DRAIN"]),
    node("n3"),
    node("n4", "fleetmedic: reimage: xid 79 again", state="mixed", flags=["DRAIN"]),
    node("n5", "[hardware_problem] ib0", flags=["DRAIN"], partitions=("gpu", "debug-q")),
    node("n6", "Not responding", state="down", flags=["NOT_RESPONDING"]),
    node("n7", "Action:Replace", flags=["DRAIN"]),
    node("n8", "slurm-operator: NodeSet", flags=["DRAIN"]),
    node("n9", "fm-east: reset: xid 48", flags=["DRAIN"]),
]


def run(plugin, tmp_path, nodes, config=None, filename="test.slurm_nodes.yml"):
    path = tmp_path / filename
    path.write_text(yaml.safe_dump({"plugin": NAME, **(config or {})}))
    calls = []

    def fake_list(conf):
        calls.append(conf)
        return nodes

    plugin._list_nodes = fake_list
    inventory = InventoryData()
    plugin.parse(inventory, DataLoader(), str(path), cache=False)
    return inventory, calls


def members(inventory, group):
    if group not in inventory.groups:
        return []
    return sorted(h.name for h in inventory.groups[group].get_hosts())


@pytest.mark.parametrize(
    ("filename", "ok"),
    [
        ("fenced.slurm_nodes.yml", True),
        ("prod.slurm_nodes.yaml", True),
        ("slurm_nodes.yml", False),
        ("fenced.k8s_nodes.yml", False),
    ],
)
def test_verify_file(plugin, tmp_path, filename, ok):
    path = tmp_path / filename
    path.write_text("plugin: " + NAME)
    assert plugin.verify_file(str(path)) is ok


def test_groups_by_rung_owner_state_and_partition(plugin, tmp_path):
    inv, _ = run(plugin, tmp_path, NODES)
    assert members(inv, "repair_reboot") == ["n1"]
    assert members(inv, "repair_reimage") == ["n4"]
    assert members(inv, "foreign_nhc") == ["n2"]
    assert members(inv, "foreign_soperator") == ["n5"]
    assert members(inv, "foreign_hyperpod") == ["n7"]
    assert members(inv, "foreign_slinky") == ["n8"]
    assert members(inv, "foreign_other") == ["n6", "n9"]  # Slurm's own; another prefix
    assert members(inv, "healthy") == ["n3"]
    assert members(inv, "in_repair") == ["n1", "n4"]
    assert members(inv, "foreign") == ["n2", "n5", "n6", "n7", "n8", "n9"]
    assert members(inv, "slurm_draining") == ["n4"]
    assert members(inv, "slurm_down") == ["n6"]
    assert members(inv, "partition_debug_q") == ["n5"]
    n1 = inv.get_host("n1").vars
    assert (n1["fleetmedic_state"], n1["fleetmedic_owner"]) == ("reboot", "ours")
    assert n1["ansible_host"] == "10.0.0.1"
    assert inv.get_host("n6").vars["fleetmedic_owner"] == "foreign"


@pytest.mark.parametrize(
    ("config", "hosts"),
    [
        ({"states": ["reboot", "reimage"]}, ["n1", "n4"]),
        ({"states": ["foreign"]}, ["n2", "n5", "n6", "n7", "n8", "n9"]),
        ({"states": ["healthy"]}, ["n3"]),
        ({"names": ["n1", "n2", "n3"], "states": ["reboot", "foreign"]}, ["n1", "n2"]),
        # another prefix makes n9 ours and ours foreign
        ({"reason_prefix": "fm-east:", "states": ["reset"]}, ["n9"]),
        ({"reason_prefix": "fm-east:", "states": ["reboot"]}, []),
    ],
)
def test_options_select_hosts(plugin, tmp_path, config, hosts):
    inv, _ = run(plugin, tmp_path, NODES, config)
    assert sorted(inv.hosts) == hosts


def test_our_prefix_with_a_rewritten_rest_shows_as_manual(plugin, tmp_path):
    inv, _ = run(plugin, tmp_path, [node("n1", "fleetmedic: bob looked at it", flags=["DRAIN"])])
    assert members(inv, "repair_manual") == ["n1"]


def test_relative_slurm_conf_is_relative_to_the_source(plugin, tmp_path):
    _, calls = run(plugin, tmp_path, [], {"slurm_conf": "etc/slurm.conf"})
    assert calls == [str(tmp_path / "etc" / "slurm.conf")]


def test_a_missing_slurm_conf_fails_in_one_line(plugin, tmp_path):
    path = tmp_path / "x.slurm_nodes.yml"
    path.write_text(yaml.safe_dump({"plugin": NAME, "slurm_conf": "/nonexistent/slurm.conf"}))
    with pytest.raises(AnsibleError) as e:
        plugin.parse(InventoryData(), DataLoader(), str(path), cache=False)
    assert str(e.value) == (
        "slurm_nodes: cannot list nodes: SLURM_CONF /nonexistent/slurm.conf: no such file"
    )
