"""NodeWriter: strikes, taints, results and events from check rounds, on an in-memory Node.

The Node store here stands in for the API server only at the unit level; the same
flows run against the real API server in tests/integration/test_agent_*.py.
"""

from __future__ import annotations

import pytest
from agent_helpers import MemoryKube

from fleetmedic.agent.writer import NodeWriter
from fleetmedic.checks.base import CheckResult
from fleetmedic.model import keys
from fleetmedic.model.vocabulary import preset
from fleetmedic.policy.strikes import Observation

VOCAB = preset()


def gpu(status: str, name: str = "nvidia.ecc", action: str | None = None) -> CheckResult:
    return CheckResult(name, status, f"{name} is {status}", {}, "gpu", action)


def net(status: str) -> CheckResult:
    return CheckResult("network.throughput", status, f"12 Mbit/s ({status})", {}, "network")


@pytest.fixture
def kube():
    return MemoryKube()


@pytest.fixture
def writer(kube):
    return NodeWriter(kube, "n1", VOCAB, strike_limit=3, clock=lambda: 1_800_000_000)


def test_three_gpu_problems_fence_with_an_event_and_keep_foreign_taints(kube, writer):
    outs = [writer.record_round([gpu("problem"), net("ok")]) for _ in range(3)]
    assert [o.fenced for o in outs] == [None, None, "reboot"]
    assert kube.taints() == {"example.com/team=a", "fleetmedic.io/repair=reboot"}
    assert kube.ann(keys.ANN_STRIKES) == {"gpu": 0, "network": 0}
    assert [e[:2] for e in kube.events] == [("FleetmedicFenced", "Warning")]
    assert "3 consecutive GPU check failures: nvidia.ecc" in kube.events[0][2]


def test_unknown_holds_the_count_and_a_pass_resets_it(kube, writer):
    writer.record_round([gpu("problem")])
    writer.record_round([gpu("unknown")])
    assert kube.ann(keys.ANN_STRIKES)["gpu"] == 1
    writer.record_round([gpu("ok")])
    assert kube.ann(keys.ANN_STRIKES)["gpu"] == 0


def test_definitive_check_action_fences_at_once(kube, writer):
    out = writer.record_round([gpu("problem", "nvidia.remapped_rows", "manual")])
    assert out.fenced == "manual" and "fleetmedic.io/repair=manual" in kube.taints()


def test_under_repair_gpu_is_skipped_and_results_say_so(kube, writer):
    kube.node["spec"]["taints"].append(VOCAB.reboot.as_taint())
    kube.node["metadata"]["annotations"][keys.ANN_STRIKES] = '{"gpu":2,"network":0}'
    out = writer.record_round([net("ok")], skipped={"gpu": "node under repair (reboot)"})
    assert out.fenced is None and out.before_repair == "reboot"
    assert kube.ann(keys.ANN_STRIKES) == {"gpu": 0, "network": 0}
    assert kube.ann(keys.ANN_LAST_RESULTS)["gpu"]["status"] == "skipped"
    assert "fleetmedic.io/repair=reboot" in kube.taints()


def test_slow_network_set_after_three_and_removed_after_one_pass(kube, writer):
    for _ in range(3):
        writer.record_round([net("problem")])
    assert "fleetmedic.io/slow-network=true" in kube.taints()
    writer.record_round([net("unknown")])
    assert "fleetmedic.io/slow-network=true" in kube.taints()
    writer.record_round([net("ok")])
    assert "fleetmedic.io/slow-network=true" not in kube.taints()
    assert [e[0] for e in kube.events] == ["FleetmedicSlowNetwork", "FleetmedicNetworkRecovered"]


def test_a_healthy_node_is_not_written_every_round(kube, writer):
    writer.record_round([gpu("ok"), net("ok")])
    first = kube.writes
    for _ in range(5):
        writer.record_round([gpu("ok"), net("ok")])
    assert kube.writes == first


def test_finding_fences_and_moves_the_watermark_in_one_write(kube, writer):
    from fleetmedic.agent.watermark import Mark

    mark = Mark("boot", "seg", "fp", 7, 10.0, "uptime", rule="xid.79", action="reboot")
    out = writer.record_finding(
        Observation("kernel", "problem", "Xid 79", "reboot"),
        lambda acted: mark.__class__(**{**mark.__dict__, "acted": acted}),
    )
    assert out.fenced == "reboot" and kube.writes == 1
    assert (
        kube.ann(keys.ANN_LAST_FINDING)["fp"] == "fp"
        and kube.ann(keys.ANN_LAST_FINDING)["acted"] is True
    )
    out = writer.record_finding(
        Observation("kernel", "problem", "Xid 79", "reboot"),
        lambda acted: mark.__class__(**{**mark.__dict__, "fp": "fp2", "acted": acted}),
    )
    assert out.fenced is None and kube.ann(keys.ANN_LAST_FINDING)["acted"] is False


def test_events_can_be_turned_off(kube):
    w = NodeWriter(kube, "n1", VOCAB, events=False)
    w.record_round([gpu("problem", action="reboot")])
    assert kube.events == [] and "fleetmedic.io/repair=reboot" in kube.taints()


def test_ossci_preset_names(kube):
    w = NodeWriter(kube, "n1", preset("ossci"))
    w.record_round([gpu("problem", action="reboot")])
    assert "repair-reboot=true" in kube.taints()
