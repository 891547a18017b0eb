"""The RMA case file (controller/rmacase.py): what a vendor's intake asks for, from the
node's records and the case phase's report, beside the evidence, within its size cap."""

from __future__ import annotations

import json

from fleetmedic.controller import rmacase
from fleetmedic.model import keys
from fleetmedic.model.gpufacts import GpuFacts, GpuReport
from fleetmedic.model.gpus import FleetHistory, Gpu, Incident, NodeRecord
from fleetmedic.model.nodestate import view
from fleetmedic.model.vocabulary import preset
from fleetmedic.policy import lemon
from fleetmedic.policy.actions import Outcome
from fleetmedic.policy.rmaflow import RmaRecord
from tests.unit.policy.policysim import config

GPU = {
    "serial": "1652000000101",
    "uid": "GPU-1",
    "index": 1,
    "family": "bus-loss",
    "count": 3,
    "window": 604800.0,
}


def incident(node, ep, at):
    return Incident("1652000000101", "GPU-1", "bus-loss", node, ep, at, "GPU_IS_LOST", 1)


def node_view(tmp_path):
    rec = RmaRecord(3, "2026-11-21T12:00:00Z", "RMA candidate: GPU 1652000000101 (...)", (GPU,))
    record = NodeRecord(
        (Gpu(1, "0000:28:00.0", "1652000000101", "GPU-1"),),
        (
            incident("gpu-2", 2, "2026-11-20T12:00:00Z"),
            incident("gpu-2", 3, "2026-11-21T12:00:00Z"),
        ),
    )
    node = {
        "metadata": {
            "name": "gpu-2",
            "labels": {keys.LABEL_VENDOR: "nvidia"},
            "annotations": {keys.ANN_RMA: rec.encode(), keys.ANN_GPUS: record.encode()},
        },
        "spec": {},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.2"}]},
    }
    return view(node, preset())


def outcome():
    facts = GpuFacts(
        1,
        "0000:28:00.0",
        "1652000000101",
        "GPU-1",
        "NVIDIA H100 80GB HBM3",
        (),
        {
            "inforom_image_version": "G520.0200.00.05",
            "vbios_version": "96.00.99.00.01",
            "retired_pages": {"double_bit_ecc": 0},
            "remapped_rows": {"failure": False},
        },
    )
    report = GpuReport("nvidia", (facts,), node={"driver_version": "550.90.07"})
    diag = {
        "status": "ok",
        "summary": "level 3: 12 tests passed",
        "level": 3,
        "results": ["x"] * 50,
    }
    return Outcome(
        "ok",
        data={lemon.REPORT_KEY: {"gpu-2": report.to_json()}, "fleetmedic_diag": {"gpu-2": diag}},
    )


def test_the_case_holds_identity_versions_counts_history_rule_and_evidence(tmp_path):
    cfg = config(ansible__evidence_dir=str(tmp_path / "ev"))
    fleet = FleetHistory([incident("gpu-9", 1, "2026-11-19T12:00:00Z")])
    [path] = rmacase.write(cfg, node_view(tmp_path), outcome(), fleet, 3, cluster="prod")
    assert path == tmp_path / "ev" / "gpu-2" / "gpu-2-e3-rma-1652000000101.json"
    case = json.loads(path.read_text())
    assert case["recommendation"] == "RMA candidate: GPU 1652000000101"
    assert case["gpu"]["serial"] == "1652000000101" and case["gpu"]["uuid"] == "GPU-1"
    assert case["gpu"]["vendor_facts"]["inforom_image_version"] == "G520.0200.00.05"
    assert case["gpu"]["vendor_facts"]["vbios_version"] == "96.00.99.00.01"
    assert case["node"] == {
        "name": "gpu-2",
        "cluster": "prod",
        "address": "10.0.0.2",
        "vendor": "nvidia",
        "facts": {"driver_version": "550.90.07"},
    }
    assert [(h["node"], h["ep"]) for h in case["history"]] == [
        ("gpu-9", 1),
        ("gpu-2", 2),
        ("gpu-2", 3),
    ]
    assert case["rule"]["family"] == "bus-loss" and case["rule"]["sources"] == [
        "nvidia-xid-catalog"
    ]
    assert case["diagnostics"]["result"]["summary"] == "level 3: 12 tests passed"
    assert oct(path.stat().st_mode & 0o777) == "0o640"


def test_a_case_over_its_cap_leaves_the_bulk_out_never_the_identity_or_history(tmp_path):
    cfg = config(
        ansible__evidence_dir=str(tmp_path / "ev"), ladder__lemon={"rma": {"max_file_mb": 0.002}}
    )
    [path] = rmacase.write(cfg, node_view(tmp_path), outcome(), None, 3)
    text = path.read_text()
    assert len(text.encode()) <= 0.002 * 2**20
    case = json.loads(text)  # still JSON
    assert case["gpu"]["serial"] == "1652000000101" and len(case["history"]) == 2
    assert case["diagnostics"]["diagnostics_detail"].startswith("left out")
    assert case["gpu"]["vendor_facts"].startswith("left out")
    full = rmacase.build(
        cfg,
        node_view(tmp_path),
        RmaRecord.decode(node_view(tmp_path).annotations[keys.ANN_RMA]),
        GPU,
        None,
        outcome(),
        None,
        3,
        "",
    )
    assert len(json.dumps(full, indent=2)) > 0.002 * 2**20, "the cap did cut something"
