"""fleetmedic.adapters.kube, lease and drain against the real API server."""

import threading
import time
import uuid

import pytest

from fleetmedic.adapters import kube as kube_adapter
from fleetmedic.adapters.lease import Lease
from fleetmedic.controller.watcher import NodeWatcher, wait_synced
from fleetmedic.errors import ConfigError, NotFoundError, PermanentError, TemporaryError
from fleetmedic.kinds import kubedrain as drain
from fleetmedic.model import keys, nodeedit
from fleetmedic.model.config import DrainConfig
from fleetmedic.model.vocabulary import preset

VOCAB = preset()
FOREIGN = {"key": "example.com/team", "value": "a", "effect": "NoSchedule"}


@pytest.fixture
def api(kube):
    return kube_adapter.connect(kube.kubeconfig)


def test_bad_kubeconfig_is_one_line_config_error(tmp_path):
    bad = tmp_path / "kc"
    bad.write_text("this: [is not a kubeconfig")
    with pytest.raises(ConfigError) as err:
        kube_adapter.connect(str(bad))
    assert "\n" not in str(err.value) and str(bad) in str(err.value)
    with pytest.raises(ConfigError, match="missing"):
        kube_adapter.connect(str(tmp_path / "missing"))


def test_unreachable_api_is_temporary(tmp_path, kube):
    text = open(kube.kubeconfig).read().replace(kube.url, "https://127.0.0.1:1")
    path = tmp_path / "kc"
    path.write_text(text)
    with pytest.raises(TemporaryError, match="unreachable"):
        kube_adapter.connect(str(path)).list_nodes()


def test_unknown_node_is_not_found(api):
    with pytest.raises(NotFoundError, match="get node no-such-node"):
        api.get_node("no-such-node")


def test_update_node_keeps_concurrent_foreign_taints(kube, api):
    name = f"adapt-{uuid.uuid4().hex[:6]}"
    kube.make_nodes([name])
    stop = threading.Event()
    added = []

    def other_actor():
        i = 0
        while not stop.is_set() and i < 40:
            t = {"key": f"example.com/churn-{i}", "value": "x", "effect": "NoSchedule"}
            api.update_node(name, lambda n, t=t: n["spec"].setdefault("taints", []).append(t))
            added.append(t)
            i += 1

    worker = threading.Thread(target=other_actor)
    worker.start()
    for state in ["reboot", "reimage", "manual"] * 4:

        def mutate(n, state=state):
            for s in ("reboot", "reimage", "manual"):
                nodeedit.remove_taint(n, VOCAB.repair(s))
            nodeedit.add_taint(n, VOCAB.repair(state))
            nodeedit.set_annotation(n, keys.ANN_STATE_SINCE, state)

        api.update_node(name, mutate)
    stop.set()
    worker.join()
    taints = api.get_node(name)["spec"]["taints"]
    for t in added:
        assert t in taints, f"lost {t['key']}"
    assert VOCAB.manual.as_taint() in taints
    assert not any(VOCAB.reboot.matches(t) for t in taints)


def test_update_node_skips_noop_writes(kube, api):
    name = f"adapt-{uuid.uuid4().hex[:6]}"
    kube.make_nodes([name])
    before = api.get_node(name)["metadata"]["resourceVersion"]
    api.update_node(name, lambda n: nodeedit.remove_taint(n, VOCAB.reboot))
    assert api.get_node(name)["metadata"]["resourceVersion"] == before


def test_watcher_sees_changes_and_recovers_from_apiserver_restart(kube, api):
    prefix = f"watch-{uuid.uuid4().hex[:6]}"
    kube.make_nodes([f"{prefix}-a"], labels={"fleetmedic.test/pool": prefix})
    watcher = NodeWatcher(
        api, label_selector=f"fleetmedic.test/pool={prefix}", watch_timeout=30, retry_delay=0.5
    )
    stop = threading.Event()
    watcher.start(stop)
    try:
        wait_synced(watcher, 30)
        assert set(watcher.snapshot()) == {f"{prefix}-a"}
        kube.make_nodes([f"{prefix}-b"], labels={"fleetmedic.test/pool": prefix}, wait=False)
        deadline = time.monotonic() + 10
        while f"{prefix}-b" not in watcher.snapshot():
            assert time.monotonic() < deadline, "watch did not deliver ADDED"
            watcher.wait_for_change(0.5)
        kube.restart_apiserver()
        api.update_node(f"{prefix}-a", lambda n: nodeedit.add_taint(n, VOCAB.reboot))
        deadline = time.monotonic() + 30
        while not any(
            VOCAB.reboot.matches(t)
            for t in watcher.snapshot()[f"{prefix}-a"].get("spec", {}).get("taints") or []
        ):
            assert time.monotonic() < deadline, "watch did not recover after an API server restart"
            watcher.wait_for_change(0.5)
    finally:
        stop.set()


def test_lease_excludes_second_holder_until_released(kube, api):
    kube.ensure_namespace("fleetmedic-test")
    name = f"lease-{uuid.uuid4().hex[:6]}"
    a = Lease(api, "fleetmedic-test", name, "a", duration=30)
    b = Lease(api, "fleetmedic-test", name, "b", duration=30)
    assert a.try_acquire()
    assert not b.try_acquire()
    assert a.try_acquire()  # renew
    assert b.current_holder() == "a"
    a.release()
    assert b.try_acquire() and a.current_holder() == "b"


def test_lease_expires(kube, api):
    kube.ensure_namespace("fleetmedic-test")
    name = f"lease-{uuid.uuid4().hex[:6]}"
    assert Lease(api, "fleetmedic-test", name, "a", duration=1).try_acquire()
    time.sleep(1.5)
    assert Lease(api, "fleetmedic-test", name, "b", duration=1).try_acquire()


def test_drain_evicts_skips_daemonsets_and_respects_pdb(kube, api):
    name = f"drain-{uuid.uuid4().hex[:6]}"
    ns = f"ns-{uuid.uuid4().hex[:6]}"
    kube.make_nodes([name])
    free = kube.make_pods(name, 2, namespace=ns, labels={"app": "free"})
    guarded = kube.make_pods(name, 1, namespace=ns, labels={"app": "guarded"}, prefix=f"{name}-g")
    ds = kube.make_pods(name, 1, namespace=ns, owner_kind="DaemonSet", prefix=f"{name}-ds")
    kube.request(
        "POST",
        f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "g"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )
    kube.set_pdb_status(ns, "g", 0)
    result = drain.drain(api, name, DrainConfig(), timeout=2, retry=0.5)
    assert not result.complete
    assert result.blocked == (f"{ns}/{guarded[0]['metadata']['name']}",)
    assert set(result.evicted) == {f"{ns}/{p['metadata']['name']}" for p in free}
    assert result.skipped == ((f"{ns}/{ds[0]['metadata']['name']}", "DaemonSet"),)
    node = api.get_node(name)
    assert (
        node["spec"]["unschedulable"]
        and node["metadata"]["annotations"][keys.ANN_CORDONED] == "true"
    )
    forced = drain.drain(api, name, DrainConfig(), timeout=1, retry=0.5, force_blocked=True)
    assert forced.complete
    assert drain.uncordon_if_ours(api, name)
    assert not api.get_node(name)["spec"].get("unschedulable")


def test_uncordon_leaves_a_human_cordon(kube, api):
    name = f"drain-{uuid.uuid4().hex[:6]}"
    kube.make_nodes([name], unschedulable=True)
    drain.drain(api, name, DrainConfig(), timeout=1)
    assert not drain.uncordon_if_ours(api, name)
    assert api.get_node(name)["spec"]["unschedulable"]


def test_forbidden_is_permanent(kube):
    kc = kube.kubeconfig_for_serviceaccount("fleetmedic-test", f"nobody-{uuid.uuid4().hex[:4]}")
    with pytest.raises(PermanentError, match="403"):
        kube_adapter.connect(kc).list_nodes()
