"""Shared by the taint-latency benches (not a bench): a watch on one Node that timestamps
when its repair taint comes and goes, and a nearest-rank percentile."""

from __future__ import annotations

import threading
import time

from fleetmedic.adapters.kube import connect

REPAIR_KEY = "fleetmedic.io/repair"


class TaintWatch:
    """Watches one Node; ``wait(present, since)`` returns when the taint was first seen so."""

    def __init__(self, kubeconfig: str, node: str) -> None:
        self.kube = connect(kubeconfig)
        self.node = node
        self.cond = threading.Condition()
        self.state: tuple[bool, float] | None = None  # (tainted, monotonic time seen)
        self.stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        nodes, rv = self.kube.list_nodes()
        for obj in nodes:
            if obj["metadata"]["name"] == self.node:
                self._saw(obj, time.monotonic())
        while not self.stop.is_set():
            for kind, obj in self.kube.watch_nodes(rv, timeout=60):
                seen = time.monotonic()
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                if kind == "BOOKMARK" or obj.get("metadata", {}).get("name") != self.node:
                    continue
                self._saw(obj, seen)

    def _saw(self, obj: dict, seen: float) -> None:
        tainted = any(t.get("key") == REPAIR_KEY for t in obj.get("spec", {}).get("taints") or [])
        with self.cond:
            if self.state is None or self.state[0] != tainted:
                self.state = (tainted, seen)
                self.cond.notify_all()

    def wait(self, tainted: bool, timeout: float = 10.0) -> float:
        with self.cond:
            ok = self.cond.wait_for(
                lambda: self.state is not None and self.state[0] == tainted, timeout
            )
            if not ok:
                raise TimeoutError(
                    f"taint {'present' if tainted else 'absent'} not seen in {timeout:g}s"
                )
            return self.state[1]


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (so the p99 of 50 trials is the slowest one)."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))]


def untaint(cluster, watch: TaintWatch, node: str, timeout: float = 10.0) -> None:
    """Remove the Node's taints (as the controller does after a repair) and wait until the
    watch has seen them gone, so the next trial starts clean."""
    cluster.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        {"spec": {"taints": None}},
        content_type="application/merge-patch+json",
    )
    watch.wait(False, timeout=timeout)
