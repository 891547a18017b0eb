"""An informer for the pods the sweeper must know about: which nodes run a GPU pod.

One paged LIST, then one WATCH with bookmarks (as the Node informer, watcher.py), of the
pods that are bound and not finished (a field selector: ``spec.nodeName!=``,
``status.phase`` neither Succeeded nor Failed). Each pod is kept as ``(node, asks for a
GPU)`` only, so 50,000 pods cost a few MB, and a sweep decision reads the set of busy
nodes without an API call. The cost on a 5,000-node fleet is the Node informer's again:
no per-node LIST (bench/sweep_planning.py measures it). The cache may lag a bind by a
moment: the sweeper asks the API server again, for that node only, after its taint is on.
"""

from __future__ import annotations

from collections.abc import Iterator

from fleetmedic.adapters.cluster import Pods
from fleetmedic.controller.watcher import Informer
from fleetmedic.policy.sweep import wants_gpu

ACTIVE_BOUND = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


def _kept(pod: dict) -> tuple[str, bool]:
    return (pod.get("spec") or {}).get("nodeName") or "", wants_gpu(pod)


class GpuPodWatcher(Informer[tuple[str, bool]]):
    what = "pod"

    def __init__(self, pods: Pods, watch_timeout: int = 300) -> None:
        super().__init__(watch_timeout=watch_timeout, transform=_kept)
        self.pods = pods

    def _list_pages(self) -> Iterator[tuple[list[dict], str]]:
        return self.pods.list_pod_pages(ACTIVE_BOUND)

    def _watch(self, rv: str) -> Iterator[tuple[str, dict]]:
        return self.pods.watch_pods(ACTIVE_BOUND, rv, self.watch_timeout)

    @staticmethod
    def _key(obj: dict) -> str:
        meta = obj["metadata"]
        return f"{meta.get('namespace', '')}/{meta['name']}"

    def gpu_nodes(self) -> set[str]:
        """Nodes that run a pod asking for a GPU (as far as the cache knows)."""
        return {node for node, gpu in self.snapshot().values() if gpu and node}


def gpu_nodes_now(pods: Pods) -> set[str]:
    """The same set from one paged LIST and no cache (for `fleetmedic plan`)."""
    kept = (_kept(pod) for page, _rv in pods.list_pod_pages(ACTIVE_BOUND) for pod in page)
    return {node for node, gpu in kept if gpu and node}
