#!/usr/bin/env python3
"""What domain incidents cost the controller's cycle (issue 29): 5,000 kwok Nodes in 280
NVLink cliques (label ``nvidia.com/gpu.clique``, 17-18 nodes each), one controller cycle
with ``domains:`` configured against the same cycle without it, as a ratio in one run.

Usage::

    .venv/bin/python bench/domain_cycle.py                 # 5000 nodes, 280 cliques
    .venv/bin/python bench/domain_cycle.py --nodes 1000 --cliques 56 --trials 20
    .venv/bin/python bench/domain_cycle.py --smoke         # 60 nodes, 4 cliques, 3 trials

Setup (all real): the test control plane (etcd, kube-apiserver, kwok; tests/harness/kube.py)
and two in-process controllers (``Controller`` of controller/loop.py, dry run: they decide
and log, change nothing) on the same pool, each with its own Node informer, one with
``domains: [{key: nvidia.com/gpu.clique}]`` and one without. What they see: one clique
failing together (5 nodes fenced after the first look, so an incident opens and holds its
clique) and a few lone failures in other cliques (settling, then their own rungs).

Figure: the median wall time of ``Controller.cycle()`` (the whole cycle: the informer's
snapshot, profiles, metrics, breaker, the domain review, decisions with the memo warm as in
an idle fleet, the budget), with domains over without, the two timed alternately so load
on the machine falls on both. Target: <= 1.1.
"""

from __future__ import annotations

import logging
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import _common  # noqa: E402
import scale_idle  # noqa: E402

from fleetmedic.adapters import kube as kube_adapter  # noqa: E402
from fleetmedic.controller.loop import Controller  # noqa: E402
from fleetmedic.controller.watcher import wait_synced  # noqa: E402
from fleetmedic.model import config as config_model  # noqa: E402
from tests.harness.ctlenv import repair_taint  # noqa: E402
from tests.harness.kube import KubeCluster  # noqa: E402

CLIQUE = "nvidia.com/gpu.clique"
TARGET = 1.1


def populate(kube: KubeCluster, pool: str, nodes: int, cliques: int) -> dict[str, list[str]]:
    """The pool's kwok Nodes, spread over ``cliques`` cliques; clique -> its nodes."""
    by_clique: dict[str, list[str]] = {}
    for i in range(nodes):
        by_clique.setdefault(f"c{i % cliques:03d}", []).append(f"{pool}-{i:05d}")
    for clique, names in by_clique.items():
        kube.make_nodes(
            names,
            labels={
                scale_idle.POOL_LABEL: pool,
                "fleetmedic.io/gpu-vendor": "nvidia",
                CLIQUE: clique,
            },
            addresses=["192.0.2.1"] * len(names),
            workers=16,
            wait=False,
        )
    scale_idle.wait_for(
        lambda: (
            len(
                kube.request(
                    "GET",
                    f"/api/v1/nodes?labelSelector={scale_idle.POOL_LABEL}%3D{pool}",
                    timeout=120,
                )["items"]
            )
            == nodes
        ),
        900,
        "nodes",
    )
    return by_clique


def fence(kube: KubeCluster, names: list[str]) -> None:
    for name in names:
        kube.request(
            "PATCH",
            f"/api/v1/nodes/{name}",
            {"spec": {"taints": [repair_taint("reboot")]}},
            content_type="application/merge-patch+json",
        )


def controller(path: Path) -> tuple[Controller, threading.Event]:
    cfg = config_model.load(path)
    kube = kube_adapter.connect(cfg.kube.kubeconfig and str(cfg.kube.kubeconfig))
    ctl = Controller(cfg, kube, dry_run=True)
    stop = threading.Event()
    ctl._stop = stop
    ctl.watcher.start(stop)
    wait_synced(ctl.watcher, 600)
    ctl.restore()
    return ctl, stop


def main() -> int:
    ap = _common.parser(__doc__)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--cliques", type=int, default=280)
    ap.add_argument("--trials", type=int, default=30)
    args = ap.parse_args()
    if args.smoke:
        args.nodes, args.cliques, args.trials = 60, 4, 3
    logging.basicConfig(level=logging.ERROR)  # (the dry runs' decision lines: not timed I/O)
    work = Path(tempfile.mkdtemp(prefix="fleetmedic-domain-bench-"))
    pool = f"dom{uuid.uuid4().hex[:5]}"
    kube = KubeCluster(work / "kube")
    kube.start()
    stops: list[threading.Event] = []
    try:
        t0 = time.monotonic()
        by_clique = populate(kube, pool, args.nodes, args.cliques)
        print(f"{args.nodes} nodes in {len(by_clique)} cliques, in {time.monotonic() - t0:.0f}s")
        plain = scale_idle.write_config(work, kube.kubeconfig, pool, leader=False)
        data = yaml.safe_load(plain.read_text())
        data["domains"] = [{"key": CLIQUE, "threshold": 5, "window": "10m"}]
        with_domains = work / "controller-domains.yaml"
        with_domains.write_text(yaml.safe_dump(data, sort_keys=False))
        ctls = {}
        for name, path in (("without", plain), ("with", with_domains)):
            ctls[name], stop = controller(path)
            stops.append(stop)
            ctls[name].cycle()  # the baseline look (and the memo filled)
        cliques = sorted(by_clique)
        storm = by_clique[cliques[0]][:5]
        lone = [by_clique[c][0] for c in cliques[1:4]]
        fence(kube, storm + lone)
        for ctl in ctls.values():
            scale_idle.wait_for(
                lambda ctl=ctl: all(
                    ctl.watcher.snapshot()[n].state == "reboot" for n in storm + lone
                ),
                60,
                "the informers to see the fences",
            )
            ctl.cycle()
        opened = ctls["with"].domains.incidents
        times: dict[str, list[float]] = {"with": [], "without": []}
        for _ in range(args.trials):
            for name, ctl in ctls.items():
                t = time.perf_counter()
                ctl.cycle()
                times[name].append(time.perf_counter() - t)
        with_s, without_s = statistics.median(times["with"]), statistics.median(times["without"])
        held = len(ctls["with"].domains.last.held)
        ratio = with_s / without_s
        print(
            f"one cycle, {args.nodes} nodes: with domains {with_s * 1000:.2f} ms, without "
            f"{without_s * 1000:.2f} ms (median of {args.trials}): ratio {ratio:.3f} "
            f"(incidents open: {len(opened)}, nodes held: {held})"
        )
        return _common.verdict(
            [
                (f"cycle with domains <= {TARGET}x without (got {ratio:.3f})", ratio <= TARGET),
                ("the clique's incident opened", len(opened) == 1),
            ],
            args.smoke,
        )
    finally:
        for stop in stops:
            stop.set()
        kube.stop()


if __name__ == "__main__":
    sys.exit(main())
