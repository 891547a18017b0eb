"""The Slurm node-document mapping (adapters/slurmdoc.py) as pure data: a SlurmNode shown
as a Node dict, and an edit's difference turned into one fence or record write (or
refused). The writes themselves run against the real slurmctld in
tests/integration/test_slurm_agent.py."""

from __future__ import annotations

import json

import pytest

from fleetmedic.adapters.slurm import Slurm, SlurmNode
from fleetmedic.adapters.slurmdoc import NotMappable, SlurmNodeDocs, finding_of, foreign
from fleetmedic.model import keys, nodeedit
from fleetmedic.model.vocabulary import preset

VOCAB = preset()


def node(reason: str = "", flags=(), state: str = "idle", extra: str = "") -> SlurmNode:
    return SlurmNode.from_json(
        {"name": "n1", "state": state, "state_flags": list(flags), "reason": reason, "extra": extra}
    )


@pytest.fixture
def docs() -> SlurmNodeDocs:
    return SlurmNodeDocs(Slurm(None), VOCAB)


def test_our_drain_is_our_repair_taint_and_the_record_the_annotations(docs):
    extra = json.dumps(
        {
            "fleetmedic": {
                keys.ANN_STRIKES: '{"gpu":1,"network":0}',
                "taints": json.dumps([VOCAB.slow_network.as_taint()]),
            },
            "site": 1,
        }
    )
    d = docs.document(node("fleetmedic: reimage: xid 79", ["DRAIN"], extra=extra))
    assert d["metadata"] == {
        "name": "n1",
        "labels": {},
        "annotations": {keys.ANN_STRIKES: '{"gpu":1,"network":0}'},
    }
    assert d["spec"]["taints"] == [VOCAB.reimage.as_taint(), VOCAB.slow_network.as_taint()]
    assert VOCAB.repair_state_of(d["spec"]["taints"]) == "reimage"


@pytest.mark.parametrize(
    "reason, flags, state",
    [
        ("NHC: check_hw_gpu", ["DRAIN"], "idle"),
        ("fleetmedic: bogus-rung: x", ["DRAIN"], "idle"),  # edited after our prefix: theirs
        ("Not responding", [], "down"),
        ("fleetmedic: reboot: x", [], "idle"),  # a reason, but no drain: no fence
    ],
)
def test_no_repair_taint_unless_our_drain(docs, reason, flags, state):
    assert docs.document(node(reason, flags, state))["spec"]["taints"] == []


def test_foreign_is_any_reason_that_is_not_ours_in_our_format():
    assert foreign(node("NHC: x", ["DRAIN"]), "fleetmedic:")
    assert foreign(node("fleetmedic:x", ["DRAIN"]), "fleetmedic:")
    assert not foreign(node("fleetmedic: manual: x", ["DRAIN"]), "fleetmedic:")
    assert not foreign(node(), "fleetmedic:")


def _edit(docs, before: SlurmNode, fn):
    doc = docs.document(before)
    after = json.loads(json.dumps(doc))
    fn(after)
    return docs._diff("n1", doc, after)


def test_a_new_repair_taint_is_a_fence_with_the_annotations_in_one_write(docs):
    def fence(d):
        nodeedit.add_taint(d, VOCAB.reboot)
        nodeedit.set_annotation(d, keys.ANN_STRIKES, '{"gpu":0,"network":0}')

    assert _edit(docs, node(), fence) == ("reboot", {keys.ANN_STRIKES: '{"gpu":0,"network":0}'})


def test_raising_our_drain_is_a_fence_and_annotations_alone_a_record(docs):
    ours = node("fleetmedic: reset: xid 95", ["DRAIN"])

    def raise_(d):
        nodeedit.remove_taint(d, VOCAB.reset)
        nodeedit.add_taint(d, VOCAB.reboot)

    assert _edit(docs, ours, raise_) == ("reboot", {})
    got = _edit(docs, ours, lambda d: nodeedit.set_annotation(d, keys.ANN_LAST_RESULTS, "{}"))
    assert got == (None, {keys.ANN_LAST_RESULTS: "{}"})


def test_slow_network_lives_in_the_record(docs):
    rung, values = _edit(docs, node(), lambda d: nodeedit.add_taint(d, VOCAB.slow_network))
    assert rung is None and json.loads(values["taints"]) == [VOCAB.slow_network.as_taint()]
    extra = json.dumps({"fleetmedic": {"taints": values["taints"]}})
    gone = _edit(docs, node(extra=extra), lambda d: nodeedit.remove_taint(d, VOCAB.slow_network))
    assert gone == (None, {"taints": None})


@pytest.mark.parametrize(
    "edit, says",
    [
        (lambda d: nodeedit.remove_taint(d, VOCAB.reboot), "never resumes"),
        (
            lambda d: (nodeedit.remove_taint(d, VOCAB.reboot), nodeedit.add_taint(d, VOCAB.reset)),
            "lowering",
        ),
        (lambda d: nodeedit.set_label(d, "x", "y"), "something else"),
        (lambda d: nodeedit.set_unschedulable(d, True), "something else"),
        (
            lambda d: d["spec"]["taints"].append({"key": "x", "effect": "NoSchedule"}),
            "not ours",
        ),
        (lambda d: nodeedit.set_annotation(d, "taints", "[]"), "reserved"),
    ],
)
def test_edits_slurm_cannot_hold_are_refused(docs, edit, says):
    with pytest.raises(NotMappable, match=says):
        _edit(docs, node("fleetmedic: reboot: x", ["DRAIN"]), edit)


def test_the_finding_is_the_evidence_of_the_same_edit():
    mark = json.dumps({"rule": "xid.79", "pci": "0000:3b:00", "msg": "GPU has fallen off the bus."})
    assert (
        finding_of({keys.ANN_LAST_FINDING: mark}, {})
        == "xid.79 0000:3b:00: GPU has fallen off the bus."
    )
    results = json.dumps(
        {
            "gpu": {"status": "problem", "detail": "nvidia.ecc: GPU 1 uncorrectable"},
            "network": {"status": "ok"},
        }
    )
    # the watermark unchanged by this edit: the failing checks are the evidence
    now = {keys.ANN_LAST_FINDING: mark, keys.ANN_LAST_RESULTS: results}
    assert (
        finding_of(now, {keys.ANN_LAST_FINDING: mark})
        == "gpu problem: nvidia.ecc: GPU 1 uncorrectable"
    )
    assert finding_of({}, {}) == "fleetmedic agent"
