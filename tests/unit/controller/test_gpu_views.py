"""The GPUs in ``fleetmedic status``, ``history`` and the metrics (controller/gpustatus.py,
gpumetrics.py): repeat offenders marked, each GPU's episodes across nodes, episodes per
GPU and the mean time between incidents per node and per pool."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client import CollectorRegistry, generate_latest

from fleetmedic.controller import gpustatus
from fleetmedic.controller.gpumetrics import GpuMetrics, mean_gap
from fleetmedic.controller.status import node_status, render_status
from fleetmedic.model import keys
from fleetmedic.model.gpus import FleetHistory, Gpu, Incident, NodeRecord
from fleetmedic.model.nodestate import view
from fleetmedic.model.vocabulary import preset
from fleetmedic.policy.rmaflow import RmaRecord

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def inc(node, ep, at, serial="S1", family="bus-loss"):
    return Incident(serial, f"U-{serial}", family, node, ep, at, "GPU_IS_LOST", 1)


def node(name, incidents=(), rma=None):
    rec = NodeRecord(
        (Gpu(0, "0000:18:00.0", "S0", "U-S0"), Gpu(1, "0000:28:00.0", "S1", "U-S1")),
        tuple(incidents),
    )
    ann = {keys.ANN_GPUS: rec.encode()}
    if rma:
        ann[keys.ANN_RMA] = rma.encode()
    return view({"metadata": {"name": name, "annotations": ann}, "spec": {}}, preset())


def test_status_marks_a_repeat_offender_and_its_rma_case():
    v = node(
        "gpu-2",
        [inc("gpu-2", 1, "2026-11-19T12:00:00Z"), inc("gpu-2", 2, "2026-11-20T12:00:00Z")],
        RmaRecord(
            2, "2026-11-20T12:00:00Z", "RMA candidate: GPU S1", ({"serial": "S1"},), ticket="sent"
        ),
    )
    calm = node("gpu-3", [inc("gpu-3", 1, "2026-11-01T12:00:00Z", serial="S9")])
    rows = [node_status(v, NOW), node_status(calm, NOW)]
    assert rows[0]["repeat_gpus"] == [
        {"gpu": 1, "serial": "S1", "family": "bus-loss", "episodes": 2}
    ]
    assert rows[0]["rma"]["ticket"] == "sent" and rows[0]["rma"]["serials"] == ["S1"]
    assert rows[1]["repeat_gpus"] == [] and rows[1]["rma"] is None
    table = render_status(rows, width=300)
    assert "GPU REPEATS" in table.splitlines()[0]
    assert "GPU1 x2 bus-loss; RMA (ticket sent)" in table
    assert "GPU REPEATS" not in render_status([rows[1]]), "no column where no GPU repeats"


def test_a_chain_older_than_its_window_is_not_a_repeat_now():
    v = node(
        "gpu-2", [inc("gpu-2", 1, "2026-10-01T12:00:00Z"), inc("gpu-2", 2, "2026-10-02T12:00:00Z")]
    )
    assert node_status(v, NOW)["repeat_gpus"] == []


def test_history_shows_each_gpu_s_episodes_on_every_node_it_was_in():
    v = node("gpu-2", [inc("gpu-2", 4, "2026-11-21T10:00:00Z")])
    fleet = FleetHistory(
        [
            inc("gpu-9", 1, "2026-11-15T10:00:00Z"),
            inc("gpu-7", 2, "2026-11-16T10:00:00Z", serial="S7"),
        ]
    )
    rows = gpustatus.history_rows(v, {}, fleet)
    assert [(r["at"], r["what"]) for r in rows] == [
        ("2026-11-21T10:00:00Z", "GPU 1 (SN S1): episode 4"),
        ("2026-11-15T10:00:00Z", "GPU 1 (SN S1): episode 1 on gpu-9"),
    ], "S7 was never in this node"
    lines = gpustatus.gpu_table(v, fleet)
    assert lines[0].startswith("GPUs") and "SN S1" in lines[2] and "bus-loss x2" in lines[2]
    assert "no incidents" in lines[1]


def test_metrics_episodes_per_gpu_and_mean_time_between_incidents():
    reg = CollectorRegistry()
    m = GpuMetrics(reg)
    a = node("a", [inc("a", 1, "2026-11-20T00:00:00Z"), inc("a", 2, "2026-11-20T02:00:00Z")])
    b = node("b", [inc("b", 1, "2026-11-20T01:00:00Z", serial="S0")])
    m.observe([a, b], {"a": "train", "b": "train"})
    text = generate_latest(reg).decode()
    assert 'fleetmedic_gpu_episodes{gpu="S1",node="a",profile="train"} 2.0' in text
    assert (
        'fleetmedic_node_mean_time_between_incidents_seconds{node="a",profile="train"} 7200.0'
        in text
    )
    assert 'node="b"' not in text.split("fleetmedic_node_mean")[1].split("# HELP")[0], (
        "one incident: no gap"
    )
    assert 'fleetmedic_pool_mean_time_between_incidents_seconds{profile="train"} 3600.0' in text
    m.observe([b], {"b": "train"})  # a node gone: its series go
    assert 'node="a"' not in generate_latest(reg).decode()
    assert mean_gap([5.0]) is None and mean_gap([0.0, 10.0, 40.0]) == 20.0
