"""The sweeper's pod cache (controller/podwatch.py): what it keeps of a pod and the set of
nodes with a GPU pod it answers from, without an API server (the informer's list/watch
loop is NodeWatcher's, run against a real one in tests/integration/test_sweeps_e2e.py)."""

from __future__ import annotations

from typing import Any, cast

from fleetmedic.adapters.kube import Kube
from fleetmedic.controller.podwatch import ACTIVE_BOUND, GpuPodWatcher


def pod(ns: str, name: str, node: str, gpus: int, rv: int) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {
        "metadata": {"namespace": ns, "name": name, "resourceVersion": str(rv)},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": limits}}]},
        "status": {"phase": "Running"},
    }


def test_gpu_nodes_follow_adds_and_deletes_keyed_by_namespace():
    w = GpuPodWatcher(cast(Kube, None))
    w._apply("ADDED", pod("a", "train", "n1", 8, 1))
    w._apply("ADDED", pod("b", "train", "n2", 8, 2))  # same name, another namespace
    w._apply("ADDED", pod("a", "web", "n3", 0, 3))
    assert w.gpu_nodes() == {"n1", "n2"}
    w._apply("DELETED", pod("a", "train", "n1", 8, 4))  # finished: leaves the selector
    assert w.gpu_nodes() == {"n2"}
    assert w.snapshot()["a/web"] == ("n3", False)


def test_the_watch_is_narrowed_to_bound_unfinished_pods():
    assert ACTIVE_BOUND == "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
