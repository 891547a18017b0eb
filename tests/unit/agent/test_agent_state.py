"""Pure parts of the agent: the watermark rules and the annotations it keeps."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from fleetmedic.agent import annotations as ann
from fleetmedic.agent.watermark import Mark, fingerprint, is_stale, locate, segment_id
from fleetmedic.checks.base import CheckResult
from fleetmedic.model import keys
from fleetmedic.model.vocabulary import preset
from fleetmedic.policy.strikes import Decision, Strikes
from fleetmedic.scan import Scanner

VOCAB = preset()


def finding(
    line="[  100.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.",
):
    return Scanner(dedup=False).feed(line)[0]


def mark(**kw):
    base = dict(boot="b1", seg="s1", fp="x", n=10, t=100.0, c="uptime")
    return Mark(**{**base, **kw})


# -- watermark -------------------------------------------------------------------------
def test_fingerprint_depends_on_time_device_and_text():
    a = finding()
    assert fingerprint(a) == fingerprint(finding())
    assert fingerprint(a) != fingerprint(
        finding(
            a.message
            and "[  101.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus."
        )
    )
    assert fingerprint(a) != fingerprint(
        finding(
            "[  100.000000] NVRM: Xid (PCI:0000:3c:00): 79, pid=1, name=x, GPU has fallen off the bus."
        )
    )


def test_segment_id_tells_identical_banners_apart_by_line():
    assert segment_id("Linux version 6.1", 1) != segment_id("Linux version 6.1", 9)
    assert segment_id("Linux version 6.1", 1) == segment_id("Linux version 6.1 ", 1)


def test_mark_round_trips_and_tolerates_garbage():
    m = Mark.of(finding(), boot="b", seg="s", line=3, acted=True, at="2026-01-01T00:00:00Z")
    assert Mark.from_json(json.loads(json.dumps(m.to_json()))) == m
    for bad in (None, "x", [], {"boot": "b"}, {"boot": "b", "fp": "f", "n": "seven"}):
        assert Mark.from_json(bad) is None


def test_locate_prefers_the_marked_line_then_the_last():
    assert locate(mark(n=5), {"x": [2, 5, 9]}) == 5
    assert locate(mark(n=4), {"x": [2, 9]}) == 9
    assert locate(mark(), {"y": [1]}) is None
    assert locate(None, {"x": [1]}) is None


def test_stale_rules():
    f = finding()  # uptime 100.0
    assert not is_stale(f, 3, None, boot="b1", seg="s1", mark_line=None)
    assert is_stale(f, 10, mark(), boot="b1", seg="s1", mark_line=10)
    assert not is_stale(f, 11, mark(), boot="b1", seg="s1", mark_line=10)
    assert not is_stale(f, 3, mark(), boot="b2", seg="s1", mark_line=10)  # another boot
    assert not is_stale(f, 3, mark(), boot="b1", seg="s2", mark_line=10)  # another segment
    assert is_stale(f, 3, mark(seg="s1"), boot="b1", seg="", mark_line=10)  # rotated: no banner
    # not found again (kmsg after a restart): by time on the same clock
    assert is_stale(f, 3, mark(t=100.0), boot="b1", seg="s1", mark_line=None)
    assert not is_stale(f, 3, mark(t=99.0), boot="b1", seg="s1", mark_line=None)
    assert not is_stale(f, 3, mark(c="wall", t=1e9), boot="b1", seg="s1", mark_line=None)
    assert not is_stale(f, 3, mark(t=None), boot="b1", seg="s1", mark_line=None)


# -- annotations -----------------------------------------------------------------------
def node(taints=(), annotations=None):
    return {
        "metadata": {"name": "n", "annotations": dict(annotations or {})},
        "spec": {"taints": list(taints)},
    }


def test_apply_decision_adds_repair_and_toggles_slow_network_only():
    foreign = {"key": "example.com/x", "value": "y", "effect": "NoSchedule"}
    n = node([foreign, VOCAB.slow_network.as_taint()])
    assert ann.apply_decision(
        n, Decision(Strikes(0, 0), repair="reboot", slow_network=False), VOCAB
    )
    assert n["spec"]["taints"] == [foreign, VOCAB.reboot.as_taint()]
    assert json.loads(n["metadata"]["annotations"][keys.ANN_STRIKES]) == {"gpu": 0, "network": 0}
    assert not ann.apply_decision(n, Decision(Strikes(0, 0)), VOCAB)  # nothing new


def test_summarize_keeps_since_while_nothing_changes():
    bad = [
        CheckResult("nvidia.ecc", "problem", "GPU 3: 2 errors", {}, "gpu"),
        CheckResult("nvidia.pcie", "ok", "fine", {}, "gpu"),
    ]
    s1 = ann.summarize(bad, None, "T1")
    assert s1 == {
        "gpu": {"status": "problem", "detail": "nvidia.ecc: GPU 3: 2 errors", "since": "T1"}
    }
    assert ann.summarize(bad, s1, "T2")["gpu"]["since"] == "T1"
    good = [CheckResult("nvidia.ecc", "ok", "fine", {}, "gpu")]
    s3 = ann.summarize(good, s1, "T3")
    assert s3["gpu"] == {"status": "ok", "since": "T3"}
    s4 = ann.summarize(
        [CheckResult("network.throughput", "ok", "9 Gbit/s", {}, "network")],
        s3,
        "T4",
        skipped={"gpu": "node under repair (reboot)"},
    )
    assert s4["gpu"]["status"] == "skipped" and s4["network"]["status"] == "ok"
    assert ann.summarize([], "garbage", "T5") == {}


@given(st.lists(st.text(max_size=2000), min_size=1, max_size=20))
def test_results_annotation_stays_small_and_valid_json(summaries):
    results = [
        CheckResult(f"nvidia.c{i}", "problem", s, {}, "gpu") for i, s in enumerate(summaries)
    ]
    n = node()
    ann.set_results(n, ann.summarize(results, None, "T"))
    raw = n["metadata"]["annotations"][keys.ANN_LAST_RESULTS]
    assert len(raw) < ann.MAX_DETAIL + 100 and len(raw.encode()) < 4 * ann.MAX_DETAIL + 100
    assert raw.isprintable() and json.loads(raw)["gpu"]["status"] == "problem"
