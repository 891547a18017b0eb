"""The test Loki works as a log source would use it: lines pushed with the labels real
shippers set come back from query_range and from the websocket tail, exactly once, and
survive a restart and a crash of Loki (tests/harness/loki.py).

Loki 3 adds to what a shipper sends, with its default limits: a ``service_name`` label
(from ``service_name``, ``app``, ``job``, ``container``, ... of the stream) and a
``detected_level`` (structured metadata, returned with the stream's labels). A log
source must expect both."""

from __future__ import annotations

import uuid

import pytest

from tests.harness.loki import SHIPPERS, kernel_labels, now_ns, pod_labels

XID = (
    "[ 8812.412345] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus."
)
NCCL = "train-0:412:530 [3] NCCL WARN Cuda failure 'unspecified launch failure'"


LOKI_ADDS = {"service_name", "detected_level"}


def _shipped(got: dict, sent: dict) -> bool:
    """Every label the shipper sent, unchanged, and nothing else but Loki's own."""
    return {k: got.get(k) for k in sent} == sent and set(got) - set(sent) <= LOKI_ADDS


def _node() -> str:
    return f"gpu-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("shipper", sorted(SHIPPERS))
def test_pushed_lines_come_back_with_their_shipper_labels(loki, shipper):
    node = _node()
    s = SHIPPERS[shipper]
    kern = kernel_labels(shipper, node=node)
    pod = pod_labels(shipper, node=node, namespace="train", pod=f"{node}-job-0", container="main")
    loki.push(kern, ["[ 8812.400000] eth0: link up", XID])
    loki.push(pod, ["step 100 loss 1.93", NCCL])

    # The node's kernel log, selected as a source would: by the kernel stream's labels
    # and the node label, with a line filter.
    selector = ",".join(f'{k}="{v}"' for k, v in kern.items())
    got = loki.wait_for(f"{{{selector}}}", 2)
    assert [e.line for e in got] == ["[ 8812.400000] eth0: link up", XID]
    assert all(e.labels[s.node] == node for e in got)
    assert all(_shipped(e.labels, kern) for e in got)
    xid = loki.query_range(f'{{{s.node}="{node}"}} |~ "NVRM: Xid"')
    assert [e.line for e in xid] == [XID] and _shipped(xid[0].labels, kern)

    # The pod's log: namespace, pod, container (and stream, job) as the shipper set them.
    got = loki.wait_for(f'{{{s.pod}="{node}-job-0"}}', 2)
    assert [e.line for e in got] == ["step 100 loss 1.93", NCCL]
    assert _shipped(got[1].labels, pod)
    assert got[1].labels[s.namespace] == "train"
    assert got[1].labels[s.container] == "main"
    if s.stream:
        assert got[1].labels[s.stream] == "stderr"


def test_query_range_window_and_direction(loki):
    node = _node()
    labels = kernel_labels("promtail", node=node)
    t0 = now_ns()
    stamps = loki.push(labels, [(t0 + i * 1_000_000, f"line {i}") for i in range(5)])
    q = f'{{node_name="{node}"}}'
    assert [e.line for e in loki.wait_for(q, 5)] == [f"line {i}" for i in range(5)]
    # start is inclusive, end exclusive: a cursor resumes at last ts + 1 without repeats.
    after = loki.query_range(q, start=stamps[2] + 1, end=now_ns() + 1)
    assert [e.line for e in after] == ["line 3", "line 4"]
    newest = loki.query_range(q, limit=2, direction="backward")
    assert [e.line for e in newest] == ["line 4", "line 3"]


def test_tail_streams_new_lines_with_labels(loki):
    node = _node()
    labels = pod_labels(
        "fluent-bit", node=node, namespace="train", pod=f"{node}-p", container="main"
    )
    loki.push(labels, ["before the tail"])
    loki.wait_for(f'{{host="{node}"}}', 1)
    with loki.tail(f'{{host="{node}"}} |= "NCCL"', start=now_ns()) as tail:
        loki.push(labels, ["no match here", NCCL, NCCL + " again"])
        got = tail.wait_for(2)
    assert [e.line for e in got] == [NCCL, NCCL + " again"]
    assert all(_shipped(e.labels, labels) for e in got)
    assert tail.dropped == []


def test_tail_replays_from_start(loki):
    node = _node()
    labels = kernel_labels("otel", node=node)
    t0 = now_ns()
    loki.push(labels, ["first", XID])
    loki.wait_for(f'{{k8s_node_name="{node}"}}', 2)
    with loki.tail(f'{{k8s_node_name="{node}"}}', start=t0) as tail:
        got = tail.wait_for(2)
    assert [e.line for e in got] == ["first", XID]


@pytest.mark.slow
def test_lines_survive_restart_and_crash_exactly_once(loki_factory):
    loki = loki_factory()
    node = _node()
    labels = kernel_labels("promtail", node=node)
    q = f'{{node_name="{node}"}}'
    loki.push(labels, ["a1", "a2"])
    loki.wait_for(q, 2)
    url = loki.url

    loki.restart()  # SIGTERM: same port, same data
    assert loki.url == url
    loki.push(labels, ["b1"])
    assert [e.line for e in loki.wait_for(q, 3)] == ["a1", "a2", "b1"]

    loki.restart(kill=True)  # SIGKILL: unflushed chunks come back from the WAL
    loki.push(labels, ["c1"])
    got = loki.wait_for(q, 4)
    assert [e.line for e in got] == ["a1", "a2", "b1", "c1"]
    assert len({e.ts for e in got}) == 4  # nothing replayed twice
    assert loki.starts == 3
