"""Shared by the taint-latency benches (not a bench): a watch on one Node that timestamps
when its repair taint comes and goes, and a nearest-rank percentile."""

from __future__ import annotations

import json
import statistics
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


def report(
    title: str, latencies: list[float], baseline: float, baseline_text: str, baseline_key: str
) -> float:
    """Print a latency bench's figures: percentiles, the ratio to the baseline measured in
    the same run (``baseline_text`` says what it is), then one JSON line (the baseline as
    ``baseline_key``). Returns the p99."""
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    print(f"{title}, {len(latencies)} trials:")
    print(
        f"  p50 {p50 * 1000:7.1f} ms   p99 {p99 * 1000:7.1f} ms   "
        f"max {max(latencies) * 1000:7.1f} ms   mean {statistics.mean(latencies) * 1000:7.1f} ms"
    )
    print(f"  baseline: {baseline_text} {baseline * 1000:.1f} ms")
    print(f"  ratio to the baseline: p50 {p50 / baseline:.1f}x, p99 {p99 / baseline:.1f}x")
    figures = {
        "trials": len(latencies),
        "p50_s": round(p50, 4),
        "p99_s": round(p99, 4),
        "max_s": round(max(latencies), 4),
        baseline_key: round(baseline, 4),
        "p50_ratio": round(p50 / baseline, 2),
        "p99_ratio": round(p99 / baseline, 2),
    }
    print(json.dumps(figures))
    return p99


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
