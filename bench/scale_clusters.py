#!/usr/bin/env python3
"""One controller, several clusters, at scale (issue 17): four test API servers with 5,000
kwok Nodes each (50 tainted per cluster), served by one ``fleetmedic run`` with
``clusters:``. Targets: idle API requests per minute per cluster <= 2 over a
no-controller baseline, controller RSS <= 150 MB for all clusters, taint -> first
playbook start p50 <= 0.2 s.

Usage::

    .venv/bin/python bench/scale_clusters.py                    # 4 x 5000 nodes, 60 s windows
    .venv/bin/python bench/scale_clusters.py --clusters 2 --nodes 1000 --window 30
    .venv/bin/python bench/scale_clusters.py --smoke            # 2 x 40 nodes, 5 s, 1 trial

Setup and method as bench/scale_idle.py (its helpers are reused): each cluster is an
etcd + kube-apiserver + kwok of its own with the shipped least-privilege identity; the
50 tainted Nodes per cluster carry ``repair=manual`` and are escalated during a settle
phase, then the controller has nothing to do. Per cluster, ``apiserver_request_total``
is read from that API server at the start and end of one window; the baseline is the
same window with no controller. Leader election is on (one Lease per cluster, renewed
every 40 s). RSS is against a bare interpreter importing the same modules (its peak,
VmHWM, is printed too: the initial relists set it). Taint ->
playbook: a healthy Node in each cluster in turn gets ``repair=reboot``; the clock runs
until that cluster's run directory (``<run_dir>/<cluster>``) gets the run; the baseline
is one node PATCH round trip. Each trial starts once the controller runs no playbook (as
in scale_idle.py: earlier trials' ansible-playbook processes, which fail against their
unreachable Nodes within seconds, would otherwise share the two CPUs with the trial).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _common  # noqa: E402
import scale_idle as si  # noqa: E402

from tests.harness.ctlrbac import NAMESPACE, SA, install_controller_rbac  # noqa: E402
from tests.harness.kube import KubeCluster  # noqa: E402

REBOOT = [{"key": "fleetmedic.io/repair", "value": "reboot", "effect": "NoSchedule"}]


def main() -> int:
    ap = _common.parser(__doc__)
    ap.add_argument("--clusters", type=int, default=4)
    ap.add_argument("--nodes", type=int, default=5000, help="per cluster")
    ap.add_argument("--tainted", type=int, default=50, help="per cluster")
    ap.add_argument("--window", type=float, default=60.0)
    ap.add_argument("--trials", type=int, default=3, help="taint -> playbook trials per cluster")
    args = ap.parse_args()
    if args.smoke:
        args.clusters, args.nodes, args.tainted, args.window, args.trials = 2, 40, 2, 5.0, 1
    work = Path(tempfile.mkdtemp(prefix="fleetmedic-clusters-"))
    pool = f"mc{uuid.uuid4().hex[:5]}"
    names = [f"c{i}" for i in range(args.clusters)]
    kubes = {n: KubeCluster(work / f"kube-{n}") for n in names}
    proc = None
    try:
        t0 = time.monotonic()
        for kube in kubes.values():  # (one at a time: each picks free ports)
            kube.start()
        healthy, identity = {}, {}
        for n, kube in kubes.items():
            install_controller_rbac(kube)
            identity[n] = kube.kubeconfig_for_serviceaccount(NAMESPACE, SA)
            healthy[n] = si.populate(kube, pool, args.nodes, args.tainted, workers=8, timeout=900)
        print(
            f"{args.clusters} clusters x {args.nodes} nodes ({args.tainted} tainted each) in "
            f"{time.monotonic() - t0:.0f}s",
            file=sys.stderr,
        )
        time.sleep(10)  # kwok's first status writes settle
        with ThreadPoolExecutor(len(names)) as pool_ex:
            base = dict(
                zip(
                    names,
                    pool_ex.map(lambda k: si.per_minute(k, args.window), kubes.values()),
                    strict=True,
                )
            )

        cfg_path = si.write_config(work, identity[names[0]], pool, leader=True)
        data = yaml.safe_load(cfg_path.read_text())
        data["clusters"] = [{"name": n, "kube": {"kubeconfig": identity[n]}} for n in names]
        cfg_path.write_text(yaml.safe_dump(data, sort_keys=False))
        log = work / "controller.log"
        proc = si.start(cfg_path, log)
        si.settle(log, quiet=10.0, timeout=600)
        req_before = {n: si.request_counts(k) for n, k in kubes.items()}
        t_idle = time.monotonic()
        time.sleep(args.window)
        req_after = {n: si.request_counts(k) for n, k in kubes.items()}
        took = time.monotonic() - t_idle
        idle = {
            n: (sum(req_after[n].values()) - sum(req_before[n].values()) - 1) * 60 / took
            for n in names
        }
        rss, peak = si.rss_mb(proc.pid), si.rss_mb(proc.pid, "VmHWM")
        bare = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import fleetmedic.service, fleetmedic.controller.loop, sys; sys.stdin.read()",
            ],
            stdin=subprocess.PIPE,
        )
        time.sleep(5)
        bare_rss = si.rss_mb(bare.pid)
        bare.stdin.close()
        bare.wait()

        run_root = Path(data["ansible"]["run_dir"])
        rtt = si.patch_rtt(kubes[names[0]], healthy[names[0]][-1])
        lat = []
        for trial in range(args.trials):
            for n, kube in kubes.items():
                si.quiet_playbooks(proc.pid)
                node = healthy[n][trial]
                run_dir = run_root / n
                before = set(os.listdir(run_dir)) if run_dir.exists() else set()
                t = time.monotonic()
                kube.request(
                    "PATCH",
                    f"/api/v1/nodes/{node}",
                    {"spec": {"taints": REBOOT}},
                    content_type="application/merge-patch+json",
                )

                def started(run_dir=run_dir, before=before, node=node):
                    if not run_dir.exists():
                        return None
                    return [d for d in os.listdir(run_dir) if d not in before and node in d]

                si.wait_for(
                    started, 30, f"a playbook run for {node} in cluster {n}", interval=0.005
                )
                lat.append(time.monotonic() - t)
        p50 = statistics.median(lat)
        worst = max(idle[n] - base[n] for n in names)
        print(
            f"scale_clusters: {args.clusters} clusters x {args.nodes} nodes, "
            f"{args.tainted} tainted each, {args.window:.0f}s windows, one controller"
        )
        for n in names:
            print(
                f"  cluster {n}: baseline {base[n]:.1f} req/min, with the controller "
                f"{idle[n] - base[n]:+.1f} req/min "
                f"(ratio {si.ratio(idle[n], base[n])}; target <= +2); "
                f"most requests: {si.top_requests(req_before[n], req_after[n])}"
            )
        print(
            f"  RSS idle: {rss:.0f} MB for {args.clusters} clusters (peak {peak:.0f} MB); bare "
            f"interpreter with the same imports {bare_rss:.0f} MB: ratio {rss / bare_rss:.2f}x "
            "(target <= 150 MB)"
        )
        print(
            f"  taint -> playbook start: p50 {p50 * 1000:.0f} ms, max {max(lat) * 1000:.0f} ms "
            f"over {len(lat)} trials; node PATCH round trip {rtt * 1000:.1f} ms: ratio "
            f"{p50 / rtt:.1f}x (target <= 0.2 s)"
        )
        return _common.verdict(
            [
                ("idle API requests/min per cluster <= 2", worst <= 2),
                ("controller RSS <= 150 MB for all clusters", rss <= 150),
                ("taint -> playbook start p50 <= 0.2 s", p50 <= 0.2),
            ],
            args.smoke,
        )
    finally:
        if proc is not None:
            si.stop(proc)
        for kube in kubes.values():
            kube.stop()


if __name__ == "__main__":
    sys.exit(main())
