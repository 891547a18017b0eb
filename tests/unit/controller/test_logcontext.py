"""Log lines name their cluster, in the loop's thread and in the threads it starts."""

from __future__ import annotations

import io
import json
import logging
import threading

from fleetmedic import logcontext
from fleetmedic.controller import audit
from fleetmedic.controller.workers import Workers


def _capture() -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(logcontext.ClusterPrefix())
    handler.setFormatter(logging.Formatter("%(cluster_prefix)s%(message)s"))
    logger = logging.getLogger(f"test-logcontext-{id(out)}")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger, out


def test_threads_started_for_a_cluster_and_their_children_carry_its_name() -> None:
    logger, out = _capture()

    def child() -> None:
        logger.info("node-1: drained")

    def loop() -> None:
        logger.info("node-1: run ok")
        t = logcontext.thread(child, name="child")
        t.start()
        t.join()

    for name in ("alpha", "beta"):
        t = logcontext.thread(loop, name=f"cluster-{name}", cluster=name)
        t.start()
        t.join()
    logger.info("signal 15: stopping")  # the main thread serves no one cluster
    assert out.getvalue().splitlines() == [
        "[alpha] node-1: run ok",
        "[alpha] node-1: drained",
        "[beta] node-1: run ok",
        "[beta] node-1: drained",
        "signal 15: stopping",
    ]


def test_the_workers_pool_logs_under_its_cluster() -> None:
    logger, out = _capture()
    seen: list[str | None] = []
    done = threading.Event()

    def job(*_args: object) -> None:
        seen.append(logcontext.CLUSTER.get())
        logger.info("node-2: reboot")
        done.set()

    workers = Workers(job, 1, on_done=lambda: None, cluster="gamma")  # type: ignore[arg-type]
    workers.pool.submit(job).result(timeout=10)
    workers.pool.shutdown()
    assert seen == ["gamma"] and out.getvalue() == "[gamma] node-2: reboot\n"


def test_audit_lines_name_the_cluster_only_when_there_is_one(caplog) -> None:
    caplog.set_level(logging.INFO, logger="fleetmedic.audit")
    line = audit.record("me", "node-3", "run", "why", "ok")
    assert "cluster" not in line

    def in_cluster() -> None:
        audit.record("me", "node-3", "run", "why", "ok")

    t = logcontext.thread(in_cluster, name="c", cluster="delta")
    t.start()
    t.join()
    last = json.loads(caplog.records[-1].getMessage())
    assert last["cluster"] == "delta" and last["node"] == "node-3"
