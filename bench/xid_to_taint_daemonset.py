#!/usr/bin/env python3
"""Xid 79 to taint through the DaemonSet: from a line written to a kubelet node's kernel
log to the repair taint visible through the API, with the agent running as
deploy/agent's DaemonSet pod (the image `make image` builds) under a real kubelet.
Target (issue 16): p50 <= 25 ms and p99 <= 100 ms.

Usage::

    .venv/bin/python bench/xid_to_taint_daemonset.py             # 200 trials, exit 1 if missed
    .venv/bin/python bench/xid_to_taint_daemonset.py --smoke     # 5 trials, no target (CI)

Setup (all real, tests/harness/kubelet.py and agent_daemonset.py): an API server with
kube-controller-manager and kube-scheduler, one nspawn node running kubelet + containerd +
runc, the agent image imported into it and deploy/agent applied (the kernel log is the
node's test log file, mounted into the pod by hostPath; the agent wakes on the write
through inotify). A watch on the Node, opened before the trials, timestamps the first
event that carries the taint.

Each trial: the repair taint is removed (as the controller would after a repair) and the
watch sees it gone; after a random pause of 20-120 ms a Xid 79 line for a GPU not used
before (so no dedup applies) is appended on the host side of the node's log, and the
clock runs until the watch delivers the tainted Node.

Baseline, measured in the same run: one raw Node PATCH round trip from this process
(merge patch of an annotation, admin credentials, kept-alive connection), one before
each trial. p50 is printed as a ratio to the baseline's median and p99 to the
baseline's p99, so the figures read the same on a slower or busier machine (the agent's
write is a GET and a PATCH: about 2x at the median); the absolute p50/p99 are compared
with the target.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.harness.agent_daemonset import (  # noqa: E402
    ImageError,
    TaintWatch,
    clear_repair,
    deploy,
    undeploy,
)
from tests.harness.agentenv import xid_line  # noqa: E402
from tests.harness.fleet import FleetError, start_fleet  # noqa: E402
from tests.harness.kube import KubeError  # noqa: E402
from tests.harness.kubelet import (  # noqa: E402
    HostSysctls,
    KubeletNode,
    find_kubelet_binaries,
    start_control_plane,
    wait_node_ready,
)

P50_TARGET, P99_TARGET = 0.025, 0.100


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (the p99 of 100 trials is the 99th slowest)."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))]


def patch_rtt(cluster, node: str, seq: int) -> float:
    t0 = time.perf_counter()
    cluster.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        {"metadata": {"annotations": {"bench.fleetmedic.io/seq": str(seq)}}},
        content_type="application/merge-patch+json",
    )
    return time.perf_counter() - t0


def main() -> int:
    try:
        return run()
    except (ImageError, KubeError, FleetError) as exc:
        print(f"xid_to_taint_daemonset: {exc}", file=sys.stderr)
        return 2


def run() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--smoke", action="store_true", help="5 trials, no target check (CI)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = ap.parse_args()
    trials = 5 if args.smoke else args.trials
    if not 1 <= trials <= 224:
        print("--trials: 1..224 (one GPU bus number each)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="fleetmedic-bench-xid-ds-"))
    binaries = find_kubelet_binaries()
    sysctls = HostSysctls()
    t_start = time.monotonic()
    cluster = start_control_plane(work / "kube", binaries)
    fleet = None
    try:
        (work / "images").mkdir()
        fleet = start_fleet(
            1,
            prefix="bench",
            owned=True,
            prepare=KubeletNode(cluster, binaries, work / "images"),
        )
        fleet.images = work / "images"
        node = fleet.node(1)
        wait_node_ready(cluster, node.name)
        ready_s = time.monotonic() - t_start
        d = deploy(cluster, fleet, interval=60, strike_limit=3)  # rounds as shipped
        watch = TaintWatch(cluster, node.name)
        watch.wait(False, timeout=30)
        # One trial that is not counted: the agent's first finding also reads its Node.
        with open(node.kern_log, "a") as f:
            f.write(xid_line(bus=0xFF, uptime=999.0))
        watch.wait(True, timeout=60)
        latencies, rtts = [], []
        rng = random.Random(16)
        for i in range(trials):
            clear_repair(cluster, node.name)
            watch.wait(False)
            rtts.append(patch_rtt(cluster, node.name, i))
            time.sleep(rng.uniform(0.02, 0.12))
            t0 = time.monotonic()
            with open(node.kern_log, "a") as f:
                f.write(xid_line(bus=0x10 + i, uptime=1000.0 + i))
            latencies.append(watch.wait(True) - t0)
        while len(rtts) < 50:
            rtts.append(patch_rtt(cluster, node.name, len(rtts)))
        watch.stop.set()
        clear_repair(cluster, node.name)
        undeploy(cluster, d.docs)
    finally:
        if fleet is not None:
            fleet.down()
        cluster.stop(keep_logs=args.keep)
        changed = sysctls.restore()
        if changed:
            print(f"host sysctls changed by the kubelet node (restored): {changed}")
    baseline = statistics.median(rtts)
    rtt99 = percentile(rtts, 99)
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    print(
        f"Xid 79 line -> repair taint through the DaemonSet (real kubelet, containerd, runc), "
        f"{len(latencies)} trials:"
    )
    print(
        f"  p50 {p50 * 1000:7.1f} ms   p99 {p99 * 1000:7.1f} ms   "
        f"max {max(latencies) * 1000:7.1f} ms   mean {statistics.mean(latencies) * 1000:7.1f} ms"
    )
    print(
        f"  baseline: one node PATCH round trip {baseline * 1000:.1f} ms median, "
        f"{rtt99 * 1000:.1f} ms p99 ({len(rtts)} of them)"
    )
    print(
        f"  ratio to the baseline: p50 {p50 / baseline:.1f}x its median, "
        f"p99 {p99 / rtt99:.1f}x its p99"
    )
    print(
        f"  setup: control plane + kubelet node Ready {ready_s:.1f} s, image import "
        f"{d.import_s:.1f} s, apply -> container running {d.apply_to_running_s:.1f} s, "
        f"-> pod Ready (agent loop running) {d.apply_to_ready_s:.1f} s"
    )
    met = p50 <= P50_TARGET and p99 <= P99_TARGET
    verdict = "smoke run, not judged" if args.smoke else ("met" if met else "MISSED")
    print(
        f"  target p50 <= {P50_TARGET * 1000:.0f} ms, p99 <= {P99_TARGET * 1000:.0f} ms: {verdict}"
    )
    print(
        json.dumps(
            {
                "trials": len(latencies),
                "p50_s": round(p50, 4),
                "p99_s": round(p99, 4),
                "max_s": round(max(latencies), 4),
                "patch_rtt_s": round(baseline, 4),
                "patch_rtt_p99_s": round(rtt99, 4),
                "p50_ratio": round(p50 / baseline, 2),
                "p99_ratio": round(p99 / rtt99, 2),
                "apply_to_ready_s": round(d.apply_to_ready_s, 2),
                "apply_to_running_s": round(d.apply_to_running_s, 2),
                "image_import_s": round(d.import_s, 2),
            }
        )
    )
    if args.keep:
        print(f"  work dir: {work}")
    else:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0 if args.smoke or met else 1


if __name__ == "__main__":
    sys.exit(main())
