"""The restore phase's operator-managed path, its pure half (policy/partition.py): which
nodes go to an operator, the trigger kept in the layout record, the state label's reading,
and the config's published defaults."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from fleetmedic.model import keys
from fleetmedic.model.config.partition import (
    DEVICE_CONFIG_MANAGER,
    MIG_MANAGER,
    PartitionOperatorConfig,
    RestoreConfig,
)
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy import partition

MIG = {"vendor": "nvidia", "partitioned": True, "gpus": [{"index": 0, "mig": True}]}
PLAIN = {"vendor": "nvidia", "partitioned": False, "gpus": [{"index": 0, "mig": False}]}


def view(layout=MIG, rec_labels=None, labels=None, ep=1, **rec) -> NodeView:
    record = {"ep": ep, "at": "2026-11-26T00:00:00Z", "summary": "s", "layout": layout, **rec}
    if rec_labels:
        record["labels"] = rec_labels
    return NodeView(
        name="n1",
        state="reboot",
        slow_network=False,
        vendor="nvidia",
        address="10.0.0.1",
        unschedulable=True,
        foreign_signals=(),
        foreign=(),
        labels=labels or {},
        annotations={keys.ANN_PARTITION: json.dumps(record)} if layout is not None else {},
        taints=(),
        resource_version="1",
    )


def test_the_defaults_are_the_published_names():
    assert MIG_MANAGER.config_label == "nvidia.com/mig.config"
    assert MIG_MANAGER.state_label == "nvidia.com/mig.config.state"
    assert (MIG_MANAGER.namespace, MIG_MANAGER.pod_labels) == (
        "gpu-operator",
        {"app": "nvidia-mig-manager"},
    )
    assert DEVICE_CONFIG_MANAGER.config_label == "dcm.amd.com/gpu-config-profile"
    assert DEVICE_CONFIG_MANAGER.state_label == "dcm.amd.com/gpu-config-profile-state"
    assert "failure" in DEVICE_CONFIG_MANAGER.failure  # DCM's word, not mig-manager's
    assert RestoreConfig().through_operator is True
    # the record keeps exactly the labels the default operators select by
    assert set(partition.OPERATOR_LABELS) == {op.config_label for op in RestoreConfig().operators}


def test_a_recorded_mig_config_label_makes_the_node_operator_managed():
    cfg = RestoreConfig()
    v = view(rec_labels={"nvidia.com/mig.config": "all-3g.40gb"})
    op, value = partition.operator_for(v, 1, cfg)
    assert (op.name, value) == ("mig-manager", "all-3g.40gb")
    amd = view(rec_labels={"dcm.amd.com/gpu-config-profile": "cpx-nps4"})
    op, value = partition.operator_for(amd, 1, cfg)
    assert (op.name, value) == ("device-config-manager", "cpx-nps4")


@pytest.mark.parametrize(
    "v, cfg",
    [
        (view(), RestoreConfig()),  # no operator label: host-managed
        (view(PLAIN, {"nvidia.com/mig.config": "all-disabled"}), RestoreConfig()),  # no parts
        (view(None, labels={"nvidia.com/mig.config": "x"}), RestoreConfig()),  # no record
        (view(rec_labels={"nvidia.com/mig.config": "x"}, ep=2), RestoreConfig()),  # old ep
        (view(rec_labels={"nvidia.com/mig.config": "x"}), RestoreConfig(through_operator=False)),
    ],
)
def test_other_nodes_are_not_handed_to_an_operator(v, cfg):
    assert partition.operator_for(v, 1, cfg) is None


def test_an_operator_configured_later_is_found_by_the_nodes_labels_now():
    mine = PartitionOperatorConfig(
        name="mine",
        config_label="example.com/layout",
        state_label="example.com/layout-state",
        namespace="ops",
        pod_labels={"app": "layout-agent"},
    )
    v = view(labels={"example.com/layout": "half"})
    op, value = partition.operator_for(v, 1, RestoreConfig(operators=(mine,)))
    assert (op.name, value) == ("mine", "half")


def test_the_trigger_is_kept_in_the_record_and_belongs_to_one_request():
    v = view(rec_labels={"nvidia.com/mig.config": "all-3g.40gb"})
    trigger = {"rid": "e1-reboot1-x", "pod": "uid-1", "name": "p", "at": "2026-11-26T00:01:00Z"}
    raw = partition.with_handoff(v.annotations[keys.ANN_PARTITION], trigger)
    rec = json.loads(raw)
    assert rec["handoff"] == trigger and rec["layout"] == MIG and rec["ep"] == 1
    kept = view(rec_labels={"nvidia.com/mig.config": "all-3g.40gb"}, handoff=trigger)
    assert partition.handoff(kept, "e1-reboot1-x") == trigger
    assert partition.handoff(kept, "e1-reboot2-y") is None  # a new attempt triggers anew
    assert partition.handoff(v, "e1-reboot1-x") is None
    assert partition.with_handoff(None, trigger) is None
    assert partition.with_handoff("{not json", trigger) is None
    # the record still counts as this episode's (a later diagnose does not overwrite it)
    assert partition.record_from(kept, 1, json.dumps({"layout": PLAIN}), "t") == {}


@pytest.mark.parametrize(
    "op, state, want",
    [
        (MIG_MANAGER, "success", "success"),
        (MIG_MANAGER, "failed", "failure"),
        (MIG_MANAGER, "pending", "waiting"),
        (MIG_MANAGER, "rebooting", "waiting"),
        (MIG_MANAGER, None, "waiting"),
        (DEVICE_CONFIG_MANAGER, "failure", "failure"),
        (DEVICE_CONFIG_MANAGER, "success", "success"),
    ],
)
def test_the_state_label_is_read_as_the_operator_writes_it(op, state, want):
    labels = {} if state is None else {op.state_label: state}
    assert partition.operator_state(op, labels) == want


def test_the_history_line_says_who_applied_the_layout():
    said = json.dumps({"applied": False, "before": "GPU 0: MIG 3g.40gb x2", "after": "GPU 0: X"})
    note = partition.operator_note(MIG_MANAGER, "all-3g.40gb", 41.6, f"ok\n{said}")
    assert note == (
        "restore: mig-manager applied nvidia.com/mig.config=all-3g.40gb (success in 42s); "
        "after: GPU 0: X"
    )
    assert partition.restored_note(json.dumps({"note": note})) == note


def test_an_operator_needs_pod_labels():
    with pytest.raises(ValidationError):
        PartitionOperatorConfig(
            name="x", config_label="a", state_label="b", namespace="n", pod_labels={}
        )
    with pytest.raises(ValidationError):
        RestoreConfig(operator_wait=0)
