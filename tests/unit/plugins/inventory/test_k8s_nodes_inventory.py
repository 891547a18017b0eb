"""Unit tests for the fleetmedic.fleet.k8s_nodes inventory plugin.

Shaped like amazon.aws's aws_ec2 tests: the plugin is loaded through Ansible's
own plugin loader (so its DOCUMENTATION really defines the options), a config
file is written, and node dicts are fed in by replacing only the plugin's data
source, ``_list_nodes``. The error tests at the bottom call the real adapter
(a missing kubeconfig, a closed port); the real API server is exercised in
tests/integration/test_inventory_k8s_nodes.py.
"""

from __future__ import annotations

import pathlib

import pytest
import yaml
from ansible.errors import AnsibleError
from ansible.inventory.data import InventoryData
from ansible.parsing.dataloader import DataLoader

from fleetmedic.model import nodestate
from fleetmedic.model.vocabulary import preset

ROOT = pathlib.Path(__file__).resolve().parents[4]
NAME = "fleetmedic.fleet.k8s_nodes"


def _loader():
    from ansible.plugins.loader import init_plugin_loader, inventory_loader
    from ansible.utils.collection_loader import AnsibleCollectionConfig

    if AnsibleCollectionConfig.collection_finder is None:
        init_plugin_loader([str(ROOT / "collections")])
    return inventory_loader


@pytest.fixture
def plugin():
    return _loader().get(NAME)


def node(name, taints=(), labels=None, annotations=None, ip="10.0.0.1", conditions=()):
    return {
        "metadata": {
            "name": name,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
            "resourceVersion": "42",
        },
        "spec": {"taints": [dict(t) for t in taints]},
        "status": {
            "addresses": (
                [{"type": "Hostname", "address": name}]
                + ([{"type": "InternalIP", "address": ip}] if ip else [])
            ),
            "conditions": list(conditions),
        },
    }


def taint(state, vocab="default"):
    names = preset(vocab)
    if state in ("slow_network", "maintenance"):
        return getattr(names, state).as_taint()
    return names.repair(state).as_taint()


NVIDIA = {"fleetmedic.io/gpu-vendor": "nvidia"}
AMD = {"fleetmedic.io/gpu-vendor": "amd"}
FOREIGN = {"key": "trainy.konduktor.ai/faulty", "value": "true", "effect": "NoSchedule"}


def run(plugin, tmp_path, nodes, config=None, cache=True, filename="test.k8s_nodes.yml"):
    """Parse a config through the plugin with ``nodes`` as the API's answer."""
    cfg = {"plugin": NAME, **(config or {})}
    path = tmp_path / filename
    path.write_text(yaml.safe_dump(cfg))
    calls = []

    def fake_list(kubeconfig, context, label_selector):
        calls.append((kubeconfig, context, label_selector))
        return nodes

    plugin._list_nodes = fake_list
    inventory = InventoryData()
    plugin.parse(inventory, DataLoader(), str(path), cache=cache)
    return inventory, calls


def members(inventory, group):
    return (
        sorted(h.name for h in inventory.groups[group].get_hosts())
        if group in inventory.groups
        else []
    )


# -- verify_file --------------------------------------------------------------
@pytest.mark.parametrize(
    "filename,ok",
    [
        ("tainted.k8s_nodes.yml", True),
        ("prod.k8s_nodes.yaml", True),
        ("k8s_nodes.yml", False),  # the suffix is ".k8s_nodes.yml", as aws_ec2 uses its own
        ("tainted.aws_ec2.yml", False),
        ("tainted.k8s_nodes.json", False),
        ("hosts.ini", False),
    ],
)
def test_verify_file(plugin, tmp_path, filename, ok):
    path = tmp_path / filename
    path.write_text(f"plugin: {NAME}\n")
    assert plugin.verify_file(str(path)) is ok


def test_verify_file_missing(plugin, tmp_path):
    assert plugin.verify_file(str(tmp_path / "absent.k8s_nodes.yml")) is False


def test_short_plugin_name_is_accepted(plugin, tmp_path):
    inventory, _ = run(plugin, tmp_path, [node("n1")], {"plugin": "fleetmedic.fleet.k8s_nodes"})
    assert members(inventory, "healthy") == ["n1"]


def test_wrong_plugin_name_is_rejected(plugin, tmp_path):
    with pytest.raises(AnsibleError, match="Incorrect plugin name"):
        run(plugin, tmp_path, [], {"plugin": "amazon.aws.aws_ec2"})


# -- groups by state ----------------------------------------------------------
@pytest.mark.parametrize("preset_name", ["default", "ossci"])
@pytest.mark.parametrize(
    "taints,groups,state",
    [
        ([], ["healthy"], "healthy"),
        (["diagnose"], ["in_repair", "repair_diagnose"], "diagnose"),
        (["reboot"], ["in_repair", "repair_reboot"], "reboot"),
        (["diagnose", "reboot"], ["in_repair", "repair_reboot"], "reboot"),  # stronger wins
        (["reimage"], ["in_repair", "repair_reimage"], "reimage"),
        (["manual"], ["in_repair", "repair_manual"], "manual"),
        (["slow_network"], ["slow_network"], "healthy"),
        (["reboot", "slow_network"], ["in_repair", "repair_reboot", "slow_network"], "reboot"),
        (["reboot", "manual"], ["in_repair", "repair_manual"], "manual"),  # furthest step wins
        (["maintenance"], ["maintenance"], "healthy"),  # a sweep holds it: not free
    ],
)
def test_groups_by_state(plugin, tmp_path, preset_name, taints, groups, state):
    n = node("n1", [taint(s, preset_name) for s in taints], NVIDIA)
    inventory, _ = run(plugin, tmp_path, [n], {"taint_preset": preset_name})
    host = inventory.get_host("n1")
    assert sorted(g.name for g in host.get_groups()) == sorted([*groups, "vendor_nvidia"])
    assert host.vars["fleetmedic_state"] == state
    # the one place that computes state agrees
    assert state == nodestate.view(n, preset(preset_name)).state
    assert host.vars["fleetmedic_slow_network"] is ("slow_network" in taints)
    assert host.vars["fleetmedic_maintenance"] is ("maintenance" in taints)


def test_other_preset_taints_are_not_ours(plugin, tmp_path):
    n = node("n1", [taint("reboot", "ossci")])
    inventory, _ = run(plugin, tmp_path, [n], {"taint_preset": "default"})
    assert members(inventory, "healthy") == ["n1"]


@pytest.mark.parametrize(
    "extra",
    [
        FOREIGN,
        {"key": "fleetmedic.io/repair", "value": "reboot", "effect": "NoExecute"},  # wrong effect
        {"key": "fleetmedic.io/repair", "value": "later", "effect": "NoSchedule"},  # unknown value
    ],
)
def test_foreign_or_malformed_taints_leave_node_healthy(plugin, tmp_path, extra):
    inventory, _ = run(plugin, tmp_path, [node("n1", [extra])])
    assert members(inventory, "healthy") == ["n1"]
    assert inventory.get_host("n1").vars["k8s_taints"] == [extra]


def test_custom_taint_names(plugin, tmp_path):
    names = {
        s: {"key": "example.com/" + s, "value": "yes"}
        for s in ("reboot", "reimage", "manual", "slow_network")
    }
    n = node("n1", [{"key": "example.com/reimage", "value": "yes", "effect": "NoSchedule"}])
    inventory, _ = run(plugin, tmp_path, [n, node("n2", [taint("reboot")])], {"taint_names": names})
    assert members(inventory, "repair_reimage") == ["n1"]
    assert members(inventory, "healthy") == ["n2"]


def test_state_groups_exist_even_when_empty(plugin, tmp_path):
    inventory, _ = run(plugin, tmp_path, [])
    for group in (
        "in_repair",
        "repair_diagnose",
        "repair_reset",
        "repair_reboot",
        "repair_power_cycle",
        "repair_reimage",
        "repair_replace",
        "repair_manual",
        "slow_network",
        "healthy",
    ):
        assert group in inventory.groups
    assert sorted(g.name for g in inventory.groups["in_repair"].child_groups) == [
        "repair_diagnose",
        "repair_manual",
        "repair_power_cycle",
        "repair_reboot",
        "repair_reimage",
        "repair_replace",
        "repair_reset",
    ]


# -- vendor groups ------------------------------------------------------------
@pytest.mark.parametrize(
    "labels,group",
    [
        (NVIDIA, "vendor_nvidia"),
        (AMD, "vendor_amd"),
        ({}, "vendor_unknown"),
        ({"fleetmedic.io/gpu-vendor": "intel"}, "vendor_unknown"),
    ],
)
def test_vendor_groups(plugin, tmp_path, labels, group):
    inventory, _ = run(plugin, tmp_path, [node("n1", labels=labels)])
    assert members(inventory, group) == ["n1"]
    assert inventory.get_host("n1").vars["fleetmedic_vendor"] == group.split("_", 1)[1]


# -- filters ------------------------------------------------------------------
FLEET = [
    node("gpu-01", [], NVIDIA, ip="10.0.0.1"),
    node("gpu-02", [taint("reboot")], NVIDIA, ip="10.0.0.2"),
    node("gpu-03", [taint("reimage")], AMD, ip="10.0.0.3"),
    node("gpu-04", [taint("manual")], AMD, ip="10.0.0.4"),
    node("gpu-05", [taint("slow_network")], NVIDIA, ip="10.0.0.5"),
    node("cpu-01", [], {}, ip="10.0.1.1"),
]


@pytest.mark.parametrize(
    "config,expected",
    [
        ({}, ["cpu-01", "gpu-01", "gpu-02", "gpu-03", "gpu-04", "gpu-05"]),
        (
            {"states": ["reboot", "reimage", "manual", "slow_network"]},
            ["gpu-02", "gpu-03", "gpu-04", "gpu-05"],
        ),
        ({"states": ["reboot"]}, ["gpu-02"]),
        ({"states": ["slow_network"]}, ["gpu-05"]),
        ({"states": ["healthy"]}, ["cpu-01", "gpu-01"]),
        ({"vendors": ["amd"]}, ["gpu-03", "gpu-04"]),
        ({"vendor": ["nvidia"], "states": ["reboot", "manual"]}, ["gpu-02"]),
        ({"vendors": ["unknown"]}, ["cpu-01"]),
        ({"names": ["gpu-02", "gpu-04", "absent"]}, ["gpu-02", "gpu-04"]),
        ({"names": ["gpu-02"], "states": ["manual"]}, []),
    ],
)
def test_filters(plugin, tmp_path, config, expected):
    inventory, _ = run(plugin, tmp_path, FLEET, config)
    assert sorted(inventory.hosts) == expected


@pytest.mark.parametrize(
    "config,expected",
    [
        ({}, (None, None, None)),
        ({"label_selector": "pool=h100"}, (None, None, "pool=h100")),
        (
            {"kubeconfig": "/etc/fleetmedic/kubeconfig", "context": "prod"},
            ("/etc/fleetmedic/kubeconfig", "prod", None),
        ),
        ({"kubeconfig": "~/kc"}, (str(pathlib.Path("~/kc").expanduser()), None, None)),
        (
            {"kubeconfig": "kc/admin.conf"},
            ("{dir}/kc/admin.conf", None, None),
        ),  # relative to the file
    ],
)
def test_options_reach_the_data_source(plugin, tmp_path, monkeypatch, config, expected):
    for var in ("FLEETMEDIC_KUBECONFIG", "K8S_AUTH_KUBECONFIG", "K8S_AUTH_CONTEXT"):
        monkeypatch.delenv(var, raising=False)
    _, calls = run(plugin, tmp_path, [], config)
    assert calls == [tuple(e.format(dir=tmp_path) if e else e for e in expected)]


def test_kubeconfig_from_environment(plugin, tmp_path, monkeypatch):
    monkeypatch.setenv("FLEETMEDIC_KUBECONFIG", "/srv/kc")
    monkeypatch.setenv("K8S_AUTH_CONTEXT", "lab")
    _, calls = run(plugin, tmp_path, [])
    assert calls == [("/srv/kc", "lab", None)]


def test_kubeconfig_may_be_a_template(plugin, tmp_path, monkeypatch):
    monkeypatch.setenv("KC_DIR", "/opt/kc")
    _, calls = run(plugin, tmp_path, [], {"kubeconfig": "{{ lookup('env', 'KC_DIR') }}/config"})
    assert calls[0][0] == "/opt/kc/config"


# -- host variables -----------------------------------------------------------
def test_host_vars(plugin, tmp_path):
    annotations = {
        "fleetmedic.io/strikes": '{"gpu": 2}',
        "fleetmedic.io/history": "[]",
        "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd.sock",
    }
    n = node(
        "gpu-02",
        [taint("reboot"), FOREIGN],
        {**NVIDIA, "zone": "a"},
        annotations,
        ip="192.168.250.12",
    )
    n["spec"]["unschedulable"] = True
    inventory, _ = run(
        plugin, tmp_path, [n], {"foreign_signals": [{"kind": "taint", "key": FOREIGN["key"]}]}
    )
    v = inventory.get_host("gpu-02").vars
    assert v["ansible_host"] == "192.168.250.12"
    assert v["k8s_labels"] == {**NVIDIA, "zone": "a"}
    assert v["k8s_taints"] == [taint("reboot"), FOREIGN]
    assert v["fleetmedic_annotations"] == {
        "fleetmedic.io/strikes": '{"gpu": 2}',
        "fleetmedic.io/history": "[]",
    }
    assert v["fleetmedic_unschedulable"] is True
    assert v["fleetmedic_foreign_signals"] == ["taint trainy.konduktor.ai/faulty"]


@pytest.mark.parametrize(
    "config,labels,annotations,expected",
    [
        ({}, {}, {}, "10.0.0.9"),
        ({}, {}, {"fleetmedic.io/ssh-host": "gpu-02.mgmt"}, "gpu-02.mgmt"),
        ({"address_annotation": "example.com/ssh"}, {}, {"example.com/ssh": "bmc-2"}, "bmc-2"),
        ({"address_annotation": "example.com/ssh"}, {}, {"fleetmedic.io/ssh-host": "ours"}, "ours"),
        (
            {"address_label": "example.com/ssh-ip"},
            {"example.com/ssh-ip": "172.16.0.2"},
            {"fleetmedic.io/ssh-host": "ours"},
            "172.16.0.2",
        ),
        ({"address_label": "example.com/ssh-ip"}, {}, {}, "10.0.0.9"),
    ],
)
def test_address_override(plugin, tmp_path, config, labels, annotations, expected):
    inventory, _ = run(
        plugin, tmp_path, [node("n1", [], labels, annotations, ip="10.0.0.9")], config
    )
    assert inventory.get_host("n1").vars["ansible_host"] == expected


def test_no_address_connects_by_name(plugin, tmp_path):
    inventory, _ = run(plugin, tmp_path, [node("n1", ip=None)])
    assert "ansible_host" not in inventory.get_host("n1").vars


def test_values_from_the_cluster_are_never_templated(plugin, tmp_path):
    from ansible.template import Templar

    evil = "{{ lookup('pipe', 'touch /tmp/fleetmedic-pwned') }}"
    inventory, _ = run(
        plugin,
        tmp_path,
        [node("n1", [], {"note": evil})],
        {"compose": {"note_copy": "k8s_labels['note']"}},
    )
    host = inventory.get_host("n1")
    assert host.vars["note_copy"] == evil
    templar = Templar(loader=DataLoader(), variables=host.vars)
    assert templar.template(host.vars["k8s_labels"]["note"]) == evil
    assert not pathlib.Path("/tmp/fleetmedic-pwned").exists()


# -- Constructable ------------------------------------------------------------
def test_compose_groups_and_keyed_groups(plugin, tmp_path):
    config = {
        "compose": {
            "ansible_user": "'ops'",
            "gpus": "k8s_labels['fleetmedic.io/expected-gpus'] | int",
        },
        "groups": {
            "cordoned": "fleetmedic_unschedulable",
            "amd_broken": "fleetmedic_vendor == 'amd'",
        },
        "keyed_groups": [
            {"prefix": "zone", "key": "k8s_labels.zone"},
            {"prefix": "state", "key": "fleetmedic_state", "parent_group": "by_state"},
        ],
    }
    a = node("a", [taint("reimage")], {**AMD, "zone": "east", "fleetmedic.io/expected-gpus": "8"})
    a["spec"]["unschedulable"] = True
    b = node("b", [], {**NVIDIA, "zone": "west", "fleetmedic.io/expected-gpus": "4"})
    inventory, _ = run(plugin, tmp_path, [a, b], config)
    assert inventory.get_host("a").vars["ansible_user"] == "ops"
    assert inventory.get_host("a").vars["gpus"] == 8
    assert members(inventory, "cordoned") == ["a"]
    assert members(inventory, "amd_broken") == ["a"]
    assert members(inventory, "zone_east") == ["a"] and members(inventory, "zone_west") == ["b"]
    assert members(inventory, "state_reimage") == ["a"] and members(inventory, "state_healthy") == [
        "b"
    ]
    assert sorted(g.name for g in inventory.groups["by_state"].child_groups) == [
        "state_healthy",
        "state_reimage",
    ]


@pytest.mark.parametrize("strict", [False, True])
def test_strict(plugin, tmp_path, strict):
    config = {"strict": strict, "compose": {"rack": "k8s_labels['rack'] | int"}}
    if strict:
        with pytest.raises(AnsibleError, match="rack"):
            run(plugin, tmp_path, [node("n1")], config)
    else:
        inventory, _ = run(plugin, tmp_path, [node("n1")], config)
        assert "rack" not in inventory.get_host("n1").vars


# -- Cacheable ----------------------------------------------------------------
def test_cache(plugin, tmp_path):
    config = {
        "cache": True,
        "cache_plugin": "ansible.builtin.jsonfile",
        "cache_connection": str(tmp_path / "cache"),
        "cache_timeout": 300,
    }
    first, calls1 = run(plugin, tmp_path, [node("n1", [taint("reboot")])], config, cache=True)
    assert len(calls1) == 1 and members(first, "repair_reboot") == ["n1"]
    plugin.update_cache_if_changed()

    fresh = _loader().get(NAME)
    second, calls2 = run(fresh, tmp_path, [node("n2")], config, cache=True)
    assert calls2 == [] and members(second, "repair_reboot") == ["n1"]  # served from the cache

    flushed, calls3 = run(fresh, tmp_path, [node("n2")], config, cache=False)  # --flush-cache
    assert len(calls3) == 1 and members(flushed, "healthy") == ["n2"]


def test_cache_off_always_asks_the_api(plugin, tmp_path):
    _, calls = run(plugin, tmp_path, [], {"cache": False}, cache=True)
    assert len(calls) == 1


# -- errors -------------------------------------------------------------------
def test_missing_fleetmedic_package_is_a_clear_error(plugin, tmp_path, monkeypatch):
    module = __import__(type(plugin).__module__, fromlist=["x"])
    monkeypatch.setattr(
        module, "FLEETMEDIC_IMPORT_ERROR", ImportError("No module named 'fleetmedic'")
    )
    with pytest.raises(AnsibleError) as err:
        run(plugin, tmp_path, [])
    assert "needs the fleetmedic Python package" in str(err.value)
    assert "\n" not in err.value.message


@pytest.mark.parametrize(
    "config,match",
    [
        ({"taint_preset": "nope"}, "unknown taint preset 'nope'"),
        (
            {"taint_names": {"rebooot": {"key": "x"}}},
            "taint vocabulary names unknown states rebooot",
        ),
        ({"foreign_signals": [{"kind": "label", "key": "x"}]}, "foreign_signals entry"),
        ({"states": ["broken"]}, "broken"),
    ],
)
def test_bad_config(plugin, tmp_path, config, match):
    with pytest.raises(AnsibleError, match=match):
        run(plugin, tmp_path, [], config)


# The real adapter, no API server needed: what an operator sees for a wrong
# kubeconfig or an unreachable server. One line each.
def _real_parse(plugin, tmp_path, config):
    path = tmp_path / "real.k8s_nodes.yml"
    path.write_text(yaml.safe_dump({"plugin": NAME, **config}))
    plugin.parse(InventoryData(), DataLoader(), str(path), cache=False)


def test_missing_kubeconfig_is_one_line(plugin, tmp_path):
    with pytest.raises(AnsibleError) as err:
        _real_parse(plugin, tmp_path, {"kubeconfig": str(tmp_path / "nope")})
    assert err.value.message.startswith("k8s_nodes: kubeconfig ")
    assert "\n" not in err.value.message


def test_malformed_kubeconfig_is_one_line(plugin, tmp_path):
    kc = tmp_path / "kc"
    kc.write_text("clusters: [this is not: a kubeconfig\n")
    with pytest.raises(AnsibleError) as err:
        _real_parse(plugin, tmp_path, {"kubeconfig": str(kc)})
    assert err.value.message.startswith("k8s_nodes: kubeconfig ")
    assert "\n" not in err.value.message


def test_unreachable_api_server_is_one_line(plugin, tmp_path):
    kc = tmp_path / "kc"
    kc.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    with pytest.raises(AnsibleError) as err:
        _real_parse(plugin, tmp_path, {"kubeconfig": str(kc)})
    assert err.value.message.startswith("k8s_nodes: cannot list nodes:")
    assert "unreachable" in err.value.message and "\n" not in err.value.message


def test_a_node_only_another_tool_flagged_has_a_group_of_its_own(plugin, tmp_path):
    """The shipped inventory/tainted.k8s_nodes.yml: a node carrying only Konduktor's taint
    is in foreign and foreign_konduktor, not dropped by the states filter."""
    shipped = yaml.safe_load((ROOT / "inventory" / "tainted.k8s_nodes.yml").read_text())
    konduktor = {"key": "trainy.konduktor.ai/faulty", "value": "true", "effect": "NoSchedule"}
    npd = {"type": "GPUProblem", "status": "True", "lastTransitionTime": "2026-11-24T10:00:00Z"}
    inventory, _ = run(
        plugin,
        tmp_path,
        [
            node("k1", taints=[konduktor]),
            node("n1", conditions=[npd], ip="10.0.0.2"),
            node("ok", ip="10.0.0.3"),
        ],
        config={k: v for k, v in shipped.items() if k != "plugin"},
    )
    assert sorted(inventory.hosts) == ["k1", "n1"], "healthy nodes are left out, flagged kept"
    assert [h.name for h in inventory.groups["foreign_konduktor"].get_hosts()] == ["k1"]
    assert [h.name for h in inventory.groups["foreign_npd"].get_hosts()] == ["n1"]
    assert {g.name for g in inventory.groups["foreign"].child_groups} == {
        "foreign_konduktor",
        "foreign_npd",
    }
    assert inventory.get_host("k1").vars["fleetmedic_state"] == "healthy"


def test_an_open_domain_incident_is_a_group_of_its_nodes(plugin, tmp_path):
    """``incident_<key>_<value>`` holds the nodes an open domain incident holds (from
    their fleetmedic.io/domain-incidents record), under ``incident``; a closed one is none."""
    from fleetmedic.policy import domainnode, domains

    opened = domains.Incident("nvidia.com/gpu.clique", "c-17", "2026-11-26T20:00:00Z", ("a",))
    closed = domains.Incident(
        "example.com/rack", "r1", "2026-11-25T20:00:00Z", ("b",), closed_at="2026-11-25T21:00:00Z"
    )
    held = {
        domainnode.ANN_INCIDENTS: domainnode.node_entry(domainnode.node_entry(None, closed), opened)
    }
    inventory, _ = run(
        plugin,
        tmp_path,
        [
            node("a", annotations=held),
            node("b", annotations=held, ip="10.0.0.2"),
            node("c", annotations={domainnode.ANN_INCIDENTS: domainnode.node_entry(None, closed)}),
        ],
    )
    group = "incident_nvidia_com_gpu_clique_c_17"
    assert sorted(h.name for h in inventory.groups[group].get_hosts()) == ["a", "b"]
    assert {g.name for g in inventory.groups["incident"].child_groups} == {group}
