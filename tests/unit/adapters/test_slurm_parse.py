"""The Slurm adapter's pure parts: node names, sinfo --json's node shape (22.05, openapi
v0.0.38, as a real sinfo printed it), the record in Extra and error mapping."""

from __future__ import annotations

import pytest

from fleetmedic.adapters.slurm import (
    JOB_ID,
    BadNodeName,
    SlurmNode,
    check_node_name,
    tool_error,
)
from fleetmedic.adapters.slurmrecord import extra_doc
from fleetmedic.errors import ConfigError, NotFoundError, PermanentError, TemporaryError

# one node of `sinfo --json` from slurm 22.05.8 (trimmed to the fields read)
SINFO_NODE = {
    "boot_time": 1795711159,
    "comment": "",
    "extra": '{"fleetmedic":{"fleetmedic.io/in-flight":"x"},"site":1}',
    "name": "n1",
    "address": "192.168.231.11",
    "state": "idle",
    "state_flags": ["DRAIN"],
    "partitions": ["gpu"],
    "reason": "fleetmedic: reboot: xid 79",
    "reason_changed_at": 1795723133,
    "reason_set_by_user": "root",
}


@pytest.mark.parametrize("name", ["n1", "gpu-node-017", "dgx.rack7.b", "N_1", "a" * 63])
def test_plain_names_pass(name):
    assert check_node_name(name) == name


@pytest.mark.parametrize(
    "name", ["", "n1;id", "n[1-3]", "n1,n2", "n 1", "-x", ".x", "a" * 64, "n1\n", "ü", None]
)
def test_other_names_are_refused_in_one_line(name):
    with pytest.raises(BadNodeName) as e:
        check_node_name(name)
    assert "\n" not in str(e.value)


def test_node_from_sinfo_json():
    n = SlurmNode.from_json(SINFO_NODE)
    assert (n.name, n.state, n.flags, n.partitions) == ("n1", "idle", {"DRAIN"}, ("gpu",))
    assert n.drain and n.drained
    assert (n.reason_user, n.reason_time, n.boot_time) == ("root", 1795723133, 1795711159)
    assert n.record == {"fleetmedic.io/in-flight": "x"}
    busy = SlurmNode.from_json({**SINFO_NODE, "state": "mixed"})
    assert busy.drain and not busy.drained  # draining: a job still runs
    bare = SlurmNode.from_json({"name": "n2", "reason_changed_at": 0, "reason_set_by_user": None})
    assert (bare.reason, bare.reason_time, bare.reason_user, bare.record) == ("", None, "", {})


@pytest.mark.parametrize(
    ("extra", "doc"),
    [("", {}), ("  ", {}), ('{"a":1}', {"a": 1}), ("[1]", None), ("gpu=h100", None)],
)
def test_extra_doc(extra, doc):
    assert extra_doc(extra) == doc


def test_unreadable_records_read_as_empty():
    for extra in ("gpu=h100", '{"fleetmedic": "x"}', '{"fleetmedic": [1]}'):
        assert SlurmNode.from_json({**SINFO_NODE, "extra": extra}).record == {}


@pytest.mark.parametrize(
    ("stderr", "kind"),
    [
        ("slurm_update error: Invalid node name specified", NotFoundError),
        (
            "slurm_load_partitions: Unable to contact slurm controller (connect failure)",
            TemporaryError,
        ),
        ("scontrol: error: Socket timed out on send/recv operation", TemporaryError),
        ("scontrol: fatal: Unable to process configuration file", ConfigError),
        ("slurm_update error: Invalid node state specified", PermanentError),
    ],
)
def test_errors_map_into_ours(stderr, kind):
    err = tool_error("scontrol update", stderr + "\nmore")
    assert type(err) is kind and "\n" not in str(err)


@pytest.mark.parametrize(
    ("job", "ok"), [("123", True), ("123_4", True), ("12;id", False), ("", False)]
)
def test_job_ids(job, ok):
    assert bool(JOB_ID.fullmatch(job)) is ok
