"""``fleetmedic watch loki`` against a real Loki and the real API server: lines pushed with
the labels real shippers set (tests/harness/loki.py) fence the Nodes they name, exactly as
the agent fences (same taint, same finding annotation); a Loki restart mid-stream loses
nothing; the source SIGKILLed and started again resumes from its cursor and counts
nothing twice; Loki down is one log line each way, not a crash."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid

import pytest
import yaml

from tests.harness import ctlenv
from tests.harness.ctlenv import FLEETMEDIC, wait_until
from tests.harness.loki import kernel_labels, pod_labels

pytestmark = [pytest.mark.kube, pytest.mark.slow]

XID79 = (
    "[ 8812.412345] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus."
)
ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
IB = (
    "kp-ddp-worker-0:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from "
    "peer 10.216.210.236<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv)"
)
REBOOT = {"key": "fleetmedic.io/repair", "value": "reboot", "effect": "NoSchedule"}


IB_THRESHOLD = (
    "kernel:\n  thresholds:\n    nccl.ib-completion: {count: 10, window: 3600, action: reboot}\n"
)


def watch(loki, kube, cursor, *args: str) -> list[str]:
    return [
        str(FLEETMEDIC),
        "watch",
        "loki",
        "--endpoint",
        loki.url,
        "--cursor-file",
        str(cursor),
        "--kubeconfig",
        str(kube.kubeconfig),
        *args,
    ]


def once(loki, kube, cursor) -> dict:
    r = subprocess.run(
        watch(loki, kube, cursor, "--once"), capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def node(kube, name: str) -> dict:
    return kube.request("GET", f"/api/v1/nodes/{name}")


def taints(kube, name: str) -> list[dict]:
    return node(kube, name)["spec"].get("taints") or []


def ann(kube, name: str, key: str):
    raw = (node(kube, name)["metadata"].get("annotations") or {}).get(key)
    return json.loads(raw) if raw else None


@pytest.fixture
def nodes(kube):
    run = uuid.uuid4().hex[:6]
    names = [f"loki-{run}-{i}" for i in range(4)]
    kube.make_nodes(names, labels={"fleetmedic.io/gpu-vendor": "nvidia"})
    yield names
    kube.delete_nodes(names)


def test_kernel_and_pod_lines_fence_their_nodes_once_across_restarts(
    loki_factory, kube, nodes, tmp_path
):
    loki = loki_factory()
    cursor = tmp_path / "cursor.json"
    a, b, c, _ = nodes
    loki.push(kernel_labels("promtail", node=a), ["[ 8812.400000] eth0: link up", XID79])
    pod = pod_labels("fluent-bit", node=b, namespace="train", pod="job-0", container="main")
    loki.push(pod, ["step 100 loss 1.93", ECC])
    loki.push(kernel_labels("otel", node=c), ["[   1.000000] Linux version 6.1.0"])  # benign
    loki.wait_for('{namespace="train"}', 2)

    got = once(loki, kube, cursor)
    assert (got["fenced"], got["unattributed"]) == (2, 0), got
    assert taints(kube, a) == [REBOOT] and taints(kube, b) == [REBOOT]
    assert taints(kube, c) == []
    finding = ann(kube, a, "fleetmedic.io/last-finding")  # the agent's watermark format
    assert finding["rule"] == "xid.79" and finding["pci"] == "0000:3b:00" and finding["acted"]
    assert ann(kube, b, "fleetmedic.io/last-finding")["rule"] == "cuda.ecc-uncorrectable"

    # again: the cursor says all of it was handled
    assert once(loki, kube, cursor)["lines"] == 0

    # Loki restarted (SIGKILL: its WAL replays); a line pushed after it comes back is read
    loki.restart(kill=True)
    loki.push(kernel_labels("otel", node=c), [XID79])
    got = once(loki, kube, cursor)
    assert got["fenced"] == 1 and taints(kube, c) == [REBOOT], got
    assert once(loki, kube, cursor)["lines"] == 0, "nothing read twice after Loki's restart"


def test_killed_source_resumes_from_its_cursor_and_counts_nothing_twice(
    loki_factory, kube, nodes, tmp_path
):
    """A monitor finding with a threshold (NCCL IB completion errors: 10 an hour) is counted
    on the Node; SIGKILL and restart the source: the count stays, then goes on."""
    loki = loki_factory()
    cursor = tmp_path / "cursor.json"
    target = nodes[3]
    labels = pod_labels("promtail", node=target, namespace="train", pod="w-0", container="main")
    log = tmp_path / "source.log"

    # no count threshold ships (issue 39): the site's agent config sets this one
    agent_cfg = tmp_path / "agent.yaml"
    agent_cfg.write_text(IB_THRESHOLD)

    def start() -> subprocess.Popen:
        return subprocess.Popen(
            watch(loki, kube, cursor, "--poll-interval", "0.3", "--agent-config", str(agent_cfg)),
            stdout=subprocess.DEVNULL,
            stderr=log.open("a"),
        )

    def counted() -> int:
        c = ann(kube, target, "fleetmedic.io/monitor-counts") or {}
        return sum(len(v.get("t", [])) for v in (c.get("seen") or {}).values())

    src = start()
    try:
        base = time.time_ns()
        for i in range(3):  # three events 30 s apart (the rule's burst is 10 s), minutes ago
            loki.push(labels, [IB], ts=base + i * 30_000_000_000 - 300_000_000_000)
        wait_until(lambda: counted() == 3, 30, "three IB errors counted")
        src.send_signal(signal.SIGKILL)
        src.wait(10)
        src = start()
        wait_until(lambda: log.read_text().count("following") == 2, 30, "restarted")
        loki.push(labels, [IB])
        wait_until(lambda: counted() == 4, 30, "the fourth counted")
        assert counted() == 4, "the three before the kill were not counted again"
        assert taints(kube, target) == [], "below the threshold of 10: no fence"

        # Loki down: one line saying so, one when it is back; the source keeps running
        loki.stop(keep_data=True)
        wait_until(lambda: "loki unreachable" in log.read_text(), 30, "the outage logged")
        assert src.poll() is None, "no crash while Loki is down"
        loki.start()
        wait_until(lambda: "loki reachable again" in log.read_text(), 90, "the recovery logged")
        assert log.read_text().count("loki unreachable") == 1 and src.poll() is None
        assert log.read_text().count("following") == 2, "it kept running, never restarted"
    finally:
        src.terminate()
        src.wait(10)


def test_the_controller_runs_the_source_and_repairs_what_it_finds_through_the_ladder(
    loki, safety_bench
):
    """`sources.loki` in the controller's config: a Xid 79 shipped to Loki for an nspawn
    node is fenced by the controller's own source and repaired through the ladder exactly
    like an agent-detected one (reboot, verify, back in service); the cursor lives on the
    controller's ConfigMap, so the line is never read again."""
    b = safety_bench(1, tag="lk")
    node = b.fleet.node(1)
    ctlenv.xid79(node)  # what the node's kernel says too: `fleetmedic check` fails until a reboot
    [name] = b.register()
    namespace, cm = "kube-system", f"fleetmedic-{b.pool}"
    b.kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/configmaps",
        {"metadata": {"name": cm, "namespace": namespace}, "data": {}},
    )
    selector = f'{{node_name="{name}"}}'  # (the shared Loki holds other tests' streams)
    cfg = b.config(
        sources={
            "loki": {
                "endpoint": loki.url,
                "kernel_queries": [selector],
                "pod_queries": [f'{{namespace="{b.pool}"}}'],
                "poll_interval": 0.3,
                "lookback": 120,
            }
        }
    )
    port = yaml.safe_load(cfg.read_text())["metrics"]["port"]
    proc = b.controller(cfg)
    wait_until(lambda: ctlenv.scrape(port, "fleetmedic_loki_up") == 1, 60, "the source polling")
    loki.push(kernel_labels("promtail", node=name), [XID79])

    def repaired() -> bool:
        assert proc.alive, proc.tail(40)
        hist = ann(b.kube, name, "fleetmedic.io/history") or []
        return [(a["step"], a["result"]) for a in hist] == [("reboot", "pass")] and not taints(
            b.kube, name
        )

    wait_until(repaired, 240, f"{name} fenced from Loki, rebooted and back in service")
    assert ann(b.kube, name, "fleetmedic.io/last-finding")["rule"] == "xid.79"
    assert ctlenv.scrape(port, 'fleetmedic_loki_findings_total{outcome="fenced"}') == 1
    cursor = json.loads(
        b.kube.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/{cm}")["data"][
            "loki-cursor"
        ]
    )
    assert any(selector in q for q in cursor), cursor
    after = time.time()
    wait_until(
        lambda: (
            (ctlenv.scrape(port, "fleetmedic_loki_last_poll_timestamp_seconds") or 0) > after + 1
        ),
        30,
        "polls after the repair",
    )
    assert ctlenv.scrape(port, 'fleetmedic_loki_findings_total{outcome="fenced"}') == 1
    assert not taints(b.kube, name), "the handled line fenced nothing again"


def test_the_shipped_deployment_runs_with_its_own_least_privilege(loki, kube, nodes, tmp_path):
    """deploy/loki-source applied as shipped (the Deployment validated by the API server);
    `fleetmedic watch loki` with that ServiceAccount's token fences a node from a Loki line
    and keeps its cursor on the shipped ConfigMap, and may do nothing more than that."""
    from pathlib import Path

    from tests.harness import manifests

    deploy = Path(__file__).resolve().parents[2] / "deploy" / "loki-source"
    kube.ensure_namespace("default")
    docs = manifests.load(deploy)
    for doc in docs:
        manifests.apply(kube, doc)
    try:
        sa = kube.kubeconfig_for_serviceaccount("fleetmedic", "fleetmedic-loki-source")
        target = nodes[2]
        loki.push(kernel_labels("fluent-bit", node=target), [XID79])
        args = [
            str(FLEETMEDIC),
            "watch",
            "loki",
            "--endpoint",
            loki.url,
            "--cursor-configmap",
            "fleetmedic/fleetmedic-loki-cursor",
            "--kubeconfig",
            str(sa),
            "--kernel-query",
            f'{{host="{target}"}}',
            "--pod-query",
            '{namespace="none-of-these"}',
            "--once",
        ]
        r = subprocess.run(args, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["fenced"] == 1 and taints(kube, target) == [REBOOT]
        cm = kube.request("GET", "/api/v1/namespaces/fleetmedic/configmaps/fleetmedic-loki-cursor")
        assert target in cm["data"]["loki-cursor"]
        again = subprocess.run(args, capture_output=True, text=True, timeout=60)
        assert json.loads(again.stdout)["lines"] == 0, "resumed from the ConfigMap"
        # another ConfigMap is not its to write: one line, exit 2
        other = [*args[:5], "--cursor-configmap", "kube-system/kube-root-ca.crt", *args[7:]]
        denied = subprocess.run(other, capture_output=True, text=True, timeout=60)
        assert denied.returncode == 2 and "forbidden" in denied.stderr.lower(), denied.stderr
        assert len(denied.stderr.strip().splitlines()) == 1, denied.stderr
    finally:
        for doc in reversed(docs):
            if doc["kind"] != "Namespace":
                manifests.remove(kube, doc)
