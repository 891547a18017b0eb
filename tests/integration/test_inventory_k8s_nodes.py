"""The k8s_nodes inventory plugin against the real API server (tests/harness/kube.py).

``ansible-inventory`` runs as an operator would run it, with the checkout's ansible.cfg,
so the plugin is found as ``fleetmedic.fleet.k8s_nodes`` and calls fleetmedic's real
Kubernetes adapter. Nodes are kwok Nodes with names and a label of their own, since the
API server is shared with other tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from fleetmedic.model.vocabulary import preset

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.kube


def ansible_env(**extra: str) -> dict[str, str]:
    venv_bin = str(Path(sys.executable).parent)
    env = dict(
        os.environ,
        PATH=f"{venv_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        # a source that fails to parse is an error, not an empty inventory
        ANSIBLE_INVENTORY_UNPARSED_FAILED="1",
    )
    for var in ("KUBECONFIG", "FLEETMEDIC_KUBECONFIG", "K8S_AUTH_KUBECONFIG", "K8S_AUTH_CONTEXT"):
        env.pop(var, None)
    env.update(extra)
    return env


def inventory(source: Path | str, *args: str, env: dict | None = None, check: bool = True):
    p = subprocess.run(
        ["ansible-inventory", "-i", str(source), *args],
        capture_output=True,
        text=True,
        env=env or ansible_env(),
        cwd=ROOT,
        timeout=120,
    )
    if check and p.returncode != 0:
        raise AssertionError(f"ansible-inventory failed ({p.returncode}): {p.stderr[-2000:]}")
    return p


def taint(state: str, vocab: str = "default") -> dict:
    names = preset(vocab)
    if state in ("slow_network", "maintenance"):
        return getattr(names, state).as_taint()
    return names.repair(state).as_taint()


@pytest.fixture(scope="module")
def fleet_nodes(kube):
    """Six kwok Nodes, one per situation, under a label unique to this module."""
    run = uuid.uuid4().hex[:6]
    label = {"fleetmedic-test/run": run}
    spec = {
        "healthy": ([], "nvidia"),
        "reboot": ([taint("reboot")], "nvidia"),
        "reimage": ([taint("reimage")], "amd"),
        "manual": ([taint("manual")], "amd"),
        "slow": ([taint("slow_network")], "nvidia"),
        "swept": ([taint("maintenance")], "nvidia"),
        "both": (
            [
                taint("reboot"),
                taint("slow_network"),
                {"key": "trainy.konduktor.ai/faulty", "value": "true", "effect": "NoSchedule"},
            ],
            "",
        ),
    }
    names = {}
    for i, (what, (taints, vendor)) in enumerate(spec.items()):
        name = f"inv-{run}-{what}"
        labels = {**label, **({"fleetmedic.io/gpu-vendor": vendor} if vendor else {})}
        kube.make_nodes(
            [name],
            labels=labels,
            taints=taints,
            addresses=[f"10.77.0.{10 + i}"],
            annotations={"fleetmedic.io/strikes": '{"gpu": 3}'},
        )
        names[what] = name
    yield {"run": run, "selector": f"fleetmedic-test/run={run}", "names": names}
    kube.delete_nodes(names.values())


def write_config(tmp_path: Path, name: str = "test.k8s_nodes.yml", **options) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"plugin": "fleetmedic.fleet.k8s_nodes", **options}))
    return path


def plain(value):
    """Values read from the cluster are untrusted (never templated); ansible-inventory
    --list marks such strings ``{"__ansible_unsafe": ...}``. Unwrap them for comparison."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def listing_of(src, env=None) -> dict:
    return plain(json.loads(inventory(src, "--list", env=env).stdout))


def groups_of(listing: dict, host: str) -> set[str]:
    return {g for g, body in listing.items() if host in (body.get("hosts") or [])}


def test_graph_shows_tainted_nodes_in_their_groups(kube, fleet_nodes, tmp_path):
    n = fleet_nodes["names"]
    src = write_config(
        tmp_path,
        kubeconfig=kube.kubeconfig,
        label_selector=fleet_nodes["selector"],
        states=["reboot", "reimage", "manual", "slow_network"],
        foreign_signals=[{"kind": "taint", "key": "trainy.konduktor.ai/faulty"}],
    )
    graph = inventory(src, "--graph").stdout
    # --graph indents members under their group
    for group, host in (
        ("repair_reboot", n["reboot"]),
        ("repair_reimage", n["reimage"]),
        ("repair_manual", n["manual"]),
        ("slow_network", n["slow"]),
        ("vendor_amd", n["reimage"]),
    ):
        section = graph.split(f"@{group}:")[1].split("@")[0]
        assert host in section, f"{host} not under @{group}:\n{graph}"
    assert n["healthy"] not in graph

    listing = listing_of(src)
    hostvars = listing["_meta"]["hostvars"]
    assert groups_of(listing, n["both"]) == {
        "repair_reboot",
        "slow_network",
        "foreign_trainy_konduktor_ai_faulty",  # the signal's group (tool: the key by default)
        "vendor_unknown",
    }
    assert listing["foreign"]["children"] == ["foreign_trainy_konduktor_ai_faulty"]
    assert groups_of(listing, n["reimage"]) == {"repair_reimage", "vendor_amd"}
    assert set(listing["in_repair"]["children"]) == {
        "repair_diagnose",  # the diagnose state (issue 27)
        "repair_reset",
        "repair_reboot",
        "repair_power_cycle",
        "repair_reimage",
        "repair_replace",
        "repair_manual",
    }
    v = hostvars[n["reboot"]]
    assert v["ansible_host"] == "10.77.0.11"
    assert v["fleetmedic_state"] == "reboot" and v["fleetmedic_vendor"] == "nvidia"
    assert v["k8s_labels"]["fleetmedic-test/run"] == fleet_nodes["run"]
    assert taint("reboot") in v["k8s_taints"]
    assert v["fleetmedic_annotations"] == {"fleetmedic.io/strikes": '{"gpu": 3}'}
    assert hostvars[n["both"]]["fleetmedic_foreign_signals"] == ["taint trainy.konduktor.ai/faulty"]


def test_a_node_under_a_sweep_is_in_maintenance_not_healthy(kube, fleet_nodes, tmp_path):
    """Every state (the default): a node a diagnostic sweep holds is not offered as healthy
    to an ad-hoc play."""
    n = fleet_nodes["names"]
    src = write_config(tmp_path, kubeconfig=kube.kubeconfig, label_selector=fleet_nodes["selector"])
    listing = listing_of(src)
    assert listing["maintenance"]["hosts"] == [n["swept"]]
    assert groups_of(listing, n["swept"]) == {"maintenance", "vendor_nvidia"}
    assert listing["healthy"]["hosts"] == [n["healthy"]]
    swept = listing["_meta"]["hostvars"][n["swept"]]
    assert swept["fleetmedic_state"] == "healthy" and swept["fleetmedic_maintenance"] is True


def test_shipped_inventory_file_with_kubeconfig_from_environment(kube, fleet_nodes):
    """inventory/tainted.k8s_nodes.yml as shipped: every fenced node, no healthy one."""
    env = ansible_env(FLEETMEDIC_KUBECONFIG=str(kube.kubeconfig))
    listing = listing_of(ROOT / "inventory" / "tainted.k8s_nodes.yml", env=env)
    n = fleet_nodes["names"]
    assert n["reboot"] in listing["repair_reboot"]["hosts"]
    assert n["manual"] in listing["repair_manual"]["hosts"]
    assert n["healthy"] not in listing["_meta"]["hostvars"]
    assert n["both"] in listing["foreign_konduktor"]["hosts"]


def test_ossci_preset_reads_ossci_taints(kube, tmp_path):
    name = f"inv-ossci-{uuid.uuid4().hex[:6]}"
    kube.make_nodes(
        [name], labels={"fleetmedic-test/ossci": name}, taints=[taint("reimage", "ossci")]
    )
    try:
        for preset_name, group in (("ossci", "repair_reimage"), ("default", "healthy")):
            src = write_config(
                tmp_path,
                f"{preset_name}.k8s_nodes.yml",
                kubeconfig=kube.kubeconfig,
                label_selector=f"fleetmedic-test/ossci={name}",
                taint_preset=preset_name,
            )
            listing = listing_of(src)
            assert listing[group]["hosts"] == [name]
    finally:
        kube.delete_nodes([name])


def test_constructed_keyed_groups_on_real_nodes(kube, fleet_nodes, tmp_path):
    src = write_config(
        tmp_path,
        kubeconfig=kube.kubeconfig,
        label_selector=fleet_nodes["selector"],
        keyed_groups=[{"prefix": "state", "key": "fleetmedic_state"}],
        compose={"ansible_user": "'ops'"},
    )
    listing = listing_of(src)
    n = fleet_nodes["names"]
    # the repair state only: a slow or swept node has none
    assert set(listing["state_healthy"]["hosts"]) == {n["healthy"], n["slow"], n["swept"]}
    assert listing["_meta"]["hostvars"][n["manual"]]["ansible_user"] == "ops"


@pytest.mark.parametrize("case", ["missing kubeconfig", "bad token", "unreachable"])
def test_clear_one_line_error(kube, tmp_path, case):
    if case == "missing kubeconfig":
        src = write_config(tmp_path, kubeconfig=str(tmp_path / "nope"))
        want = "k8s_nodes: kubeconfig "
    else:
        cfg = yaml.safe_load(Path(kube.kubeconfig).read_text())
        if case == "bad token":
            for user in cfg["users"]:
                user["user"] = {"token": "not-a-valid-token"}
            want = "k8s_nodes: cannot list nodes: list nodes: HTTP 401"
        else:
            for cluster in cfg["clusters"]:
                cluster["cluster"]["server"] = "https://127.0.0.1:9"
            want = (
                "k8s_nodes: cannot list nodes: list nodes: "
                "API server https://127.0.0.1:9 unreachable"
            )
        kc = tmp_path / "kubeconfig"
        kc.write_text(yaml.safe_dump(cfg))
        src = write_config(tmp_path, kubeconfig=str(kc))
    p = inventory(src, "--graph", check=False)
    assert p.returncode != 0
    lines = [line for line in p.stderr.splitlines() if want in line]
    assert lines, p.stderr[-3000:]
    message = lines[0][lines[0].index("k8s_nodes:") :]
    assert len(message) < 300, message
