#!/usr/bin/env python3
"""Sweep planning cost (issue 20 part 4): 5,000 kwok Nodes, 10 % of them idle (the other
90 % run a pod that asks for ``nvidia.com/gpu``). What the sweeper adds to the idle
controller: API requests per minute, and the time of one sweep decision.

Usage::

    .venv/bin/python bench/sweep_planning.py                   # 5000 nodes, 60 s windows
    .venv/bin/python bench/sweep_planning.py --nodes 1000 --window 30
    .venv/bin/python bench/sweep_planning.py --smoke           # 60 nodes, 5 s windows

Setup (all real): the test control plane (etcd, kube-apiserver, kwok, tests/harness/kube.py)
and ``fleetmedic run`` as a subprocess with the shipped least-privilege identity
(deploy/controller's ServiceAccount, which grants pods list/watch), its pool selected by
label, nothing to repair.

Figures, each against the idle controller in the same run:
- requests/min: ``apiserver_request_total`` over a window (scale_idle.py's way), with no
  controller (the harness and kwok), with the controller without ``sweep:``, and with
  ``sweep:`` whose window is closed (the sweeper's steady cost: its pod informer, one
  LIST in pages and one WATCH per 5 min). The sweeper's figure is the difference to the
  idle controller (both with leader election on, as deployed), and the ratio of the two
  controllers' figures; the requests on pods are counted apart, since only the sweeper
  makes them (a window's total also moves by a Lease renewal more or less).
- one sweep decision: ``policy.sweep.plan`` over the 5,000 views and the set of nodes with
  a GPU pod (from the pod cache: :meth:`GpuPodWatcher.gpu_nodes`, timed with it), against
  the idle controller's own decision on the same views (``decide_all`` + ``make_plan``,
  without its memo: every node decided). Median of ``--trials``; in-process, on the
  Nodes and pods read from the API server, with the same code the controller runs.
Targets: the sweeper adds <= 2 requests/min (no per-node LIST), and a sweep decision
costs no more than the controller's own (ratio <= 1).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _common  # noqa: E402
import scale_idle  # noqa: E402

from fleetmedic.adapters import kube as kube_adapter  # noqa: E402
from fleetmedic.controller.podwatch import GpuPodWatcher  # noqa: E402
from fleetmedic.controller.watcher import NodeWatcher, wait_synced  # noqa: E402
from fleetmedic.model import config as config_model  # noqa: E402
from fleetmedic.model.nodestate import view  # noqa: E402
from fleetmedic.policy import sweep  # noqa: E402
from fleetmedic.policy.plan import decide_all, make_plan  # noqa: E402
from fleetmedic.policy.profiles import assign  # noqa: E402
from tests.harness.ctlrbac import NAMESPACE, SA, install_controller_rbac  # noqa: E402
from tests.harness.kube import KubeCluster  # noqa: E402

NAMESPACE_PODS = "bench-gpu"
CLOSED = [{"days": ["sun"], "start": "00:00", "end": "00:01"}]  # (the window one sees: none)


def gpu_pods(kube: KubeCluster, nodes: list[str], workers: int = 16) -> None:
    """One pod asking for a GPU on each of ``nodes`` (bound by nodeName, as a scheduler
    would); kwok runs them."""
    kube.ensure_namespace(NAMESPACE_PODS)

    def make(node: str) -> None:
        kube.request(
            "POST",
            f"/api/v1/namespaces/{NAMESPACE_PODS}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"train-{node}"},
                "spec": {
                    "nodeName": node,
                    "automountServiceAccountToken": False,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.invalid/fleetmedic/pause:1",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}},
                        }
                    ],
                },
            },
            timeout=120,
        )

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(make, nodes))


def quiet(kube: KubeCluster, rate: float, timeout: float) -> None:
    """Wait until the API server serves fewer than ``rate`` requests/min (5 s samples):
    kwok writes each new pod's status for a while after the pods are made."""
    deadline = time.monotonic() + timeout
    while scale_idle.per_minute(kube, 5.0) >= rate:
        if time.monotonic() > deadline:
            raise SystemExit("the API server never went quiet")


def with_sweep(path: Path, closed: bool) -> Path:
    data = yaml.safe_load(path.read_text())
    data["sweep"] = {"every": "6h", "max_concurrent": 2, **({"windows": CLOSED} if closed else {})}
    out = path.with_name(path.stem + "-sweep.yaml")
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def controller_rate(
    config: Path, log: Path, kube: KubeCluster, window: float
) -> tuple[float, float, str]:
    """Requests/min while this controller runs settled, those on pods, and what they were."""
    p = scale_idle.start(config, log)
    try:
        scale_idle.settle(log)
        before = scale_idle.request_counts(kube)
        t0 = time.monotonic()
        time.sleep(window)
        after = scale_idle.request_counts(kube)
        took = time.monotonic() - t0
        total = sum(after.values()) - sum(before.values()) - 1  # minus the /metrics read
        pods = sum(v - before.get(k, 0) for k, v in after.items() if k[1] == "pods")
        return total * 60 / took, pods * 60 / took, scale_idle.top_requests(before, after)
    finally:
        scale_idle.stop(p)


def decision_times(
    kubeconfig: str, config: Path, trials: int
) -> tuple[float, float, float, int, int]:
    """Medians (s) of a sweep decision, the controller's decision with every node decided
    and with its memo warm (a cycle of an idle controller); nodes; sweeps planned."""
    cfg = config_model.load(config)
    kube = kube_adapter.connect(kubeconfig)
    stop = threading.Event()
    nodes: NodeWatcher = NodeWatcher(
        kube, cfg.kube.label_selector, transform=lambda n: view(n, cfg.vocabulary(), cfg.foreign())
    )
    pods = GpuPodWatcher(kube)
    nodes.start(stop)
    pods.start(stop)
    try:
        wait_synced(nodes, 300)
        wait_synced(pods, 300)
        snap = nodes.snapshot()
        views = [snap[n] for n in sorted(snap)]
        now = datetime.now(UTC)
        sweeps, ladders, warm, planned = [], [], [], 0
        memo: dict = {}
        decide_all(views, now, cfg, memo=memo)
        for _ in range(trials):
            t0 = time.perf_counter()
            assignment = assign(views, cfg)
            decisions = decide_all(views, now, cfg, assignment=assignment)
            make_plan(views, decisions, now, cfg, assignment=assignment)
            ladders.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            assignment = assign(views, cfg)
            decisions = decide_all(views, now, cfg, memo=memo, assignment=assignment)
            make_plan(views, decisions, now, cfg, assignment=assignment)
            warm.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            assignment = assign(views, cfg)
            plan = sweep.plan(views, now, cfg, assignment, gpu_busy=pods.gpu_nodes())
            sweeps.append(time.perf_counter() - t0)
            planned = len(plan.start)
        return (
            statistics.median(sweeps),
            statistics.median(ladders),
            statistics.median(warm),
            len(views),
            planned,
        )
    finally:
        stop.set()


def main() -> int:
    ap = _common.parser(__doc__)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--idle", type=float, default=10.0, help="percent of nodes without a GPU pod")
    ap.add_argument("--window", type=float, default=60.0)
    ap.add_argument("--trials", type=int, default=20)
    args = ap.parse_args()
    if args.smoke:
        args.nodes, args.window, args.trials = 60, 5.0, 3
    work = Path(tempfile.mkdtemp(prefix="fleetmedic-sweep-bench-"))
    pool = f"sweep{uuid.uuid4().hex[:5]}"
    kube = KubeCluster(work / "kube")
    kube.start()
    try:
        install_controller_rbac(kube)
        sa = kube.kubeconfig_for_serviceaccount(NAMESPACE, SA)
        t0 = time.monotonic()
        healthy = scale_idle.populate(kube, pool, args.nodes, tainted=1)
        idle = max(1, int(args.nodes * args.idle / 100))
        busy = healthy[idle:]
        gpu_pods(kube, busy)
        print(
            f"{args.nodes} nodes, {len(busy)} with a GPU pod, in {time.monotonic() - t0:.0f}s",
            file=sys.stderr,
        )
        quiet(kube, 2.0 * 60, 600 if not args.smoke else 60)  # kwok's pod status writes end
        # leader election on, as deployed: the idle controller then renews its Lease
        plain = scale_idle.write_config(work, sa, pool, leader=True)
        idle_rate, idle_pods, idle_top = controller_rate(
            plain, work / "idle.log", kube, args.window
        )
        closed = with_sweep(plain, closed=True)
        sweep_rate, sweep_pods, sweep_top = controller_rate(
            closed, work / "sweep.log", kube, args.window
        )
        base = scale_idle.per_minute(kube, args.window)  # (after: no kwok writes left)
        idle_rate -= base
        sweep_rate -= base
        t_sweep, t_ladder, t_warm, n, planned = decision_times(
            kube.kubeconfig, with_sweep(plain, closed=False), args.trials
        )
        added = sweep_rate - idle_rate
        # the sweeper's own calls are the pods ones (its informer); the rest of a window's
        # difference is the other requests' noise (a Lease renewal more or less)
        added_pods = sweep_pods - idle_pods
        print(
            f"sweep_planning: {n} nodes, {len(busy)} with a GPU pod "
            f"({100 - args.idle:.0f} %), {args.window:.0f}s windows"
        )
        print(f"  API requests/min, no controller: {base:.1f} in total")
        print(f"  idle controller (no sweep:): {idle_rate:+.1f} req/min over that ({idle_top})")
        print(
            f"  controller with sweep: (window closed): {sweep_rate:+.1f} req/min: the sweeper "
            f"adds {added:+.1f} req/min (ratio {scale_idle.ratio(sweep_rate, idle_rate)} of "
            f"the idle controller's; {sweep_top}); on pods, the sweeper's informer: "
            f"{added_pods:+.2f} req/min"
        )
        print(
            f"  one sweep decision: {t_sweep * 1000:.2f} ms (plans {planned} sweeps) against the "
            f"controller's own decision on the same views, every node decided "
            f"{t_ladder * 1000:.2f} ms: ratio {t_sweep / t_ladder:.3f}x; with its memo warm "
            f"(an idle cycle) {t_warm * 1000:.2f} ms: ratio {t_sweep / t_warm:.3f}x "
            f"(medians of {args.trials})"
        )
        return _common.verdict(
            [
                ("the sweeper adds <= 2 requests/min (its pod informer)", added_pods <= 2),
                ("a sweep decision costs <= the controller's own", t_sweep <= t_ladder),
            ],
            args.smoke,
        )
    finally:
        kube.stop()


if __name__ == "__main__":
    sys.exit(main())
