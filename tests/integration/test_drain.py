"""kinds/kubedrain.py against the real API server, with kwok playing the kubelet.

Pods annotated ``fleetmedic.test/ignores-sigterm`` stay Terminating for their whole grace
period (our kwok stage, tests/kube/kwok/stages), so a drain that does not wait, or does not
pass ``grace_period`` to the eviction, is seen here. Times come from the drain's own
record (``DrainResult.seconds``) and the pods' ``deletionTimestamp``s as the API server
set them; a watch in the test sees each pod's deletion options.
"""

from __future__ import annotations

import threading
import uuid

import pytest

from fleetmedic.adapters import kube as kube_adapter
from fleetmedic.kinds import kubedrain as drain
from fleetmedic.model.config import DrainConfig
from fleetmedic.policy.drainplan import EMPTYDIR, NO_CONTROLLER

SLOW = {"fleetmedic.test/ignores-sigterm": "true"}
GPU = {"limits": {"nvidia.com/gpu": "1"}}
IMAGE = "registry.invalid/fleetmedic/pause:1"


@pytest.fixture
def api(kube):
    return kube_adapter.connect(kube.kubeconfig)


@pytest.fixture
def node(kube):
    name = f"drain-{uuid.uuid4().hex[:6]}"
    kube.make_nodes([name])
    yield name
    kube.delete_nodes([name])


def ns() -> str:
    return f"dr-{uuid.uuid4().hex[:6]}"


def live(kube, namespace: str) -> set[str]:
    return {
        p["metadata"]["name"]
        for p in kube.request("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
    }


def ref(pod: dict) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


class DeletionsSeen:
    """The deletion grace each pod on ``node`` was given, from a watch (the pods are gone
    by the time the drain returns)."""

    def __init__(self, api, node: str) -> None:
        _, rv = api.list_pods_on_node(node)
        self.grace: dict[str, int] = {}
        self.stop = threading.Event()

        def run():
            while not self.stop.is_set():
                for _, pod in api.watch_pods_on_node(node, rv, 2):
                    meta = pod["metadata"]
                    if meta.get("deletionGracePeriodSeconds") is not None:
                        self.grace.setdefault(meta["name"], meta["deletionGracePeriodSeconds"])

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(5)


def test_waits_until_an_evicted_pod_is_gone(kube, api, node):
    space = ns()
    [slow] = kube.make_pods(
        node, 1, namespace=space, annotations=SLOW, spec={"terminationGracePeriodSeconds": 6}
    )
    fast = kube.make_pods(node, 2, namespace=space, prefix=f"{node}-fast")
    with DeletionsSeen(api, node) as seen:
        result = drain.drain(api, node, DrainConfig(timeout=60))
    assert result.status == "ok", result.message
    assert set(result.evicted) == {ref(p) for p in [slow, *fast]}
    assert not result.terminating
    assert 5 <= result.seconds < 20, f"held {result.seconds:.1f}s by a pod with 6s of grace"
    assert not live(kube, space), "every evicted pod is gone when the drain returns"
    assert seen.grace[slow["metadata"]["name"]] == 6, "unset grace_period: the pod's own"


def test_grace_period_goes_to_the_eviction(kube, api, node):
    space = ns()
    [slow] = kube.make_pods(
        node, 1, namespace=space, annotations=SLOW, spec={"terminationGracePeriodSeconds": 300}
    )
    with DeletionsSeen(api, node) as seen:
        result = drain.drain(api, node, DrainConfig(timeout=60, grace_period=2))
    assert result.status == "ok" and result.evicted == (ref(slow),), result.message
    assert seen.grace[slow["metadata"]["name"]] == 2
    assert 1 <= result.seconds < 15, result.seconds


def test_pods_still_terminating_at_the_timeout_are_reported_not_waited_for(kube, api, node):
    space = ns()
    [slow] = kube.make_pods(
        node, 1, namespace=space, annotations=SLOW, spec={"terminationGracePeriodSeconds": 120}
    )
    result = drain.drain(api, node, DrainConfig(timeout=3))
    assert result.status == "ok", "a pod stuck terminating must not hold a repair"
    assert result.terminating == (ref(slow),) and not result.evicted
    assert 3 <= result.seconds < 10, result.seconds
    assert "1 still terminating" in result.message
    events = kube.request(
        "GET", f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D{node}"
    )["items"]
    assert "DrainTimeout" in {e["reason"] for e in events}


def test_kubectls_rules_by_config(kube, api, node):
    space = ns()
    [work] = kube.make_pods(node, 1, namespace=space, prefix=f"{node}-work")
    [bare] = kube.make_pods(node, 1, namespace=space, prefix=f"{node}-bare", owner_kind=None)
    scratch = {"volumes": [{"name": "scratch", "emptyDir": {}}]}
    [local] = kube.make_pods(node, 1, namespace=space, prefix=f"{node}-local", spec=scratch)
    [ds] = kube.make_pods(node, 1, namespace=space, prefix=f"{node}-ds", owner_kind="DaemonSet")
    [mirror] = kube.make_pods(
        node,
        1,
        namespace=space,
        prefix=f"{node}-static",
        owner_kind=None,
        annotations={"kubernetes.io/config.mirror": "static"},
    )
    result = drain.drain(api, node, DrainConfig(timeout=10))
    assert result.status == "blocked", "refused pods are an outcome, not a silent skip"
    assert result.evicted == (ref(work),)
    assert dict(result.refused) == {ref(bare): NO_CONTROLLER, ref(local): EMPTYDIR}
    assert dict(result.skipped) == {ref(ds): "DaemonSet", ref(mirror): "mirror"}
    assert "allowed by safety.drain.force" in result.message
    assert "allowed by safety.drain.delete_emptydir_data" in result.message
    left = {p["metadata"]["name"] for p in (bare, local, ds, mirror)}
    assert live(kube, space) == left
    allowed = drain.drain(api, node, DrainConfig(timeout=10, force=True, delete_emptydir_data=True))
    assert allowed.status == "ok", allowed.message
    assert set(allowed.evicted) == {ref(bare), ref(local)}
    assert live(kube, space) == {ds["metadata"]["name"], mirror["metadata"]["name"]}


def test_gpu_only_evicts_only_gpu_pods_and_still_cordons(kube, api, node):
    space = ns()
    [gpu] = kube.make_pods(
        node,
        1,
        namespace=space,
        prefix=f"{node}-gpu",
        spec={"containers": [{"name": "main", "image": IMAGE, "resources": GPU}]},
    )
    [init] = kube.make_pods(
        node,
        1,
        namespace=space,
        prefix=f"{node}-init",
        wait=False,  # kwok's fast stages do not run init containers; evicting needs no Ready
        spec={"initContainers": [{"name": "probe", "image": IMAGE, "resources": GPU}]},
    )
    [cpu] = kube.make_pods(node, 1, namespace=space, prefix=f"{node}-cpu")
    result = drain.drain(api, node, DrainConfig(timeout=20), gpu_only=True)
    assert result.status == "ok", result.message
    assert set(result.evicted) == {ref(gpu), ref(init)}
    assert dict(result.skipped) == {ref(cpu): "no GPU"}
    assert live(kube, space) == {cpu["metadata"]["name"]}
    assert api.get_node(node)["spec"]["unschedulable"]


def test_api_calls_do_not_grow_with_the_pods(kube, api, node):
    """kubectl GETs every evicted pod until it is gone; this drain lists the node's pods
    and watches them, so 40 pods (10 slow to go) cost a handful of reads."""
    space = ns()
    kube.make_pods(node, 30, namespace=space, prefix=f"{node}-f")
    kube.make_pods(
        node,
        10,
        namespace=space,
        prefix=f"{node}-s",
        annotations=SLOW,
        spec={"terminationGracePeriodSeconds": 4},
    )
    before = kube.request_counts("pods")
    evictions = kube.request_counts("pods", "eviction").get("POST", 0)
    result = drain.drain(api, node, DrainConfig(timeout=60))
    after = kube.request_counts("pods")
    assert result.status == "ok" and len(result.evicted) == 40, result.message
    delta = {verb: after.get(verb, 0) - before.get(verb, 0) for verb in ("GET", "LIST", "WATCH")}
    print(f"drain of 40 pods in {result.seconds:.1f}s: pod reads {delta}")
    assert delta["GET"] == 0, delta
    assert delta["LIST"] <= 3 and delta["WATCH"] <= 3, delta
    assert kube.request_counts("pods", "eviction").get("POST", 0) - evictions == 40
