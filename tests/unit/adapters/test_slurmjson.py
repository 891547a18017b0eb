"""Slurm's node JSON by declared version (adapters/slurmjson.py), on answers the real tools
printed (tests/unit/adapters/data/slurm: Debian's 22.05.8 ``sinfo --json``, 24.11.5's and
26.05.5's ``scontrol --json=<v> show node``, one node drained by us with a record in Extra
and a Comment, the other idle)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from fleetmedic.adapters import slurmjson
from fleetmedic.adapters.slurm import SlurmNode
from fleetmedic.errors import ConfigError, TemporaryError

DATA = Path(__file__).parent / "data" / "slurm"
REASON = "fleetmedic: reboot: xid.79 0000:3b:00: GPU has fallen off the bus."
EXTRA = '{"fleetmedic":{"fleetmedic.io/in-flight":"{\\"phase\\":\\"reboot\\"}"},"site":1}'
ANSWERS = {
    "22.05.8-sinfo.json": "openapi/v0.0.38",
    "24.11.5-show-node-v0.0.40.json": "data_parser/v0.0.40",
    "24.11.5-show-node-v0.0.41.json": "data_parser/v0.0.41",
    "24.11.5-show-node-v0.0.42.json": "data_parser/v0.0.42",
    "26.05.5-show-node-v0.0.42.json": "data_parser/v0.0.42",
    "26.05.5-show-node-v0.0.43.json": "data_parser/v0.0.43",
    "26.05.5-show-node-v0.0.44.json": "data_parser/v0.0.44",
    "26.05.5-show-node-v0.0.45.json": "data_parser/v0.0.45",
}
ADDRESS = {"26.05.5": "192.168.224.11"}  # (the test cluster's; 127.0.0.1 in the others)


def text(name: str) -> str:
    return (DATA / name).read_text()


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_each_version_reads_to_the_same_nodes(name):
    doc = json.loads(text(name))
    assert slurmjson.declared(doc) == ANSWERS[name]
    nodes = {n["name"]: SlurmNode.from_json(n) for n in slurmjson.node_list(text(name), name)}
    assert sorted(nodes) == ["n1", "n2"]
    n1, n2 = nodes["n1"], nodes["n2"]
    assert (n1.state, n1.flags, n1.reason, n1.reason_user) == ("idle", {"DRAIN"}, REASON, "root")
    assert n1.drain and n1.drained and n1.extra == EXTRA and n1.comment == "RMA 4711"
    assert n1.record == {"fleetmedic.io/in-flight": '{"phase":"reboot"}'}
    assert n1.partitions == ("gpu",) and n1.address == ADDRESS.get(name[:7], "127.0.0.1")
    assert n1.boot_time and n1.boot_time > 1_700_000_000
    assert n1.reason_time and n1.reason_time >= n1.boot_time
    assert (n2.state, n2.flags, n2.reason, n2.reason_time, n2.extra) == (
        "idle",
        set(),
        "",
        None,
        "",
    )


@pytest.mark.parametrize("release", ["24.11.5", "26.05.5"])
def test_the_versions_agree_field_by_field(release):
    """Not only the fields asserted above: every field the adapter keeps is the same in
    the data_parser versions of one answer (the same moment of one slurmctld: 24.11's
    three, 26.05's four)."""
    got = {n: slurmjson.node_list(text(n), n) for n in ANSWERS if n.startswith(release)}
    assert len(got) == {"24.11.5": 3, "26.05.5": 4}[release]
    first, *rest = got.values()
    assert all(r == first for r in rest)


def test_the_newest_data_parser_is_asked_first_and_each_is_read():
    """26.05 deprecates v0.0.42 and its release notes say 26.11 removes it: a Slurm that
    ships a newer one is read with that, the older ones stay for 24.11."""
    assert slurmjson.DATA_PARSERS[0] == "v0.0.45"
    assert list(slurmjson.DATA_PARSERS) == sorted(slurmjson.DATA_PARSERS, reverse=True)
    assert {f"data_parser/{v}" for v in slurmjson.DATA_PARSERS} <= set(slurmjson.PARSERS)


def test_a_name_filter_answers_one_node_and_an_unknown_name_none():
    one = slurmjson.node_list(text("24.11.5-show-node-n2.json"), "scontrol show node n2")
    assert [n["name"] for n in one] == ["n2"]
    for release in ("24.11.5", "26.05.5"):
        none = text(f"{release}-show-node-unknown.json")
        assert slurmjson.node_list(none, "scontrol show node nX") == []
        assert slurmjson.no_such_nodes(none)
    assert not slurmjson.no_such_nodes(text(list(ANSWERS)[1]))


def test_state_words_split_into_base_state_and_flags():
    doc = json.loads(text("24.11.5-show-node-v0.0.42.json"))
    doc["nodes"][0]["state"] = ["DOWN", "DRAIN", "REBOOT_ISSUED"]
    doc["nodes"][0]["boot_time"] = {"set": False, "infinite": False, "number": 0}
    [n1, _] = slurmjson.node_list(json.dumps(doc), "t")
    assert (n1["state"], n1["state_flags"], n1["boot_time"]) == (
        "down",
        ["DRAIN", "REBOOT_ISSUED"],
        0,
    )


def test_slurmctld_down_in_22_05_is_temporary_never_no_nodes():
    with pytest.raises(TemporaryError, match="Unspecified error"):
        slurmjson.node_list(text("22.05.8-sinfo-ctld-down.json"), "sinfo --json")


@pytest.mark.parametrize(
    "plugin",
    [
        {"type": "openapi/v0.0.37", "name": "Slurm OpenAPI v0.0.37"},  # 21.08
        {"type": "", "name": "", "data_parser": "data_parser/v0.0.46"},  # a later release
        {"type": "", "name": "", "data_parser": "data_parser/v0.0.39"},  # 23.02, not checked
        {},
    ],
)
def test_an_unknown_version_is_one_clear_line_never_a_parse(plugin):
    doc = json.loads(text("24.11.5-show-node-v0.0.42.json"))
    doc["meta"]["plugin"] = plugin
    with pytest.raises(slurmjson.UnsupportedSlurmJson) as e:
        slurmjson.node_list(json.dumps(doc), "scontrol show node --json")
    msg = str(e.value)
    assert isinstance(e.value, ConfigError) and "\n" not in msg
    assert "24.11.5" in msg and "does not read" in msg
    assert (plugin.get("data_parser") or plugin.get("type") or "undeclared") in msg


def test_a_22_05_answer_that_claims_to_be_v0_0_42_is_not_read_as_one():
    """The declared version decides, and a shape that does not fit it is refused: a
    string state under data_parser/v0.0.42 is not split into letters."""
    doc = json.loads(text("22.05.8-sinfo.json"))
    doc["meta"]["plugin"] = {"data_parser": "data_parser/v0.0.42"}
    with pytest.raises(
        slurmjson.UnsupportedSlurmJson, match=r"not in data_parser/v0\.0\.42's shape"
    ):
        slurmjson.node_list(json.dumps(doc), "t")


@pytest.mark.parametrize(
    "field,value",
    [("boot_time", 1795878365), ("reason", 7), ("partitions", "gpu"), ("state", "IDLE")],
)
def test_a_field_in_another_shape_is_refused_naming_the_node(field, value):
    doc = json.loads(text("24.11.5-show-node-v0.0.42.json"))
    bad = copy.deepcopy(doc)
    bad["nodes"][1][field] = value
    with pytest.raises(slurmjson.UnsupportedSlurmJson, match="node 'n2'") as e:
        slurmjson.node_list(json.dumps(bad), "t")
    assert field in str(e.value)


def test_unreadable_output_is_temporary():
    with pytest.raises(TemporaryError, match="unreadable"):
        slurmjson.node_list('{"nodes": [', "sinfo --json")
    with pytest.raises(TemporaryError, match="unreadable"):
        slurmjson.node_list("[]", "sinfo --json")


@pytest.mark.parametrize(
    "out,version",
    [("slurm-wlm 22.05.8\n", (22, 5)), ("slurm 24.11.5", (24, 11)), ("slurm 25.05.0-1", (25, 5))],
)
def test_versions_and_the_command_each_reads_with(out, version):
    assert slurmjson.parse_version(out) == version
    argv = slurmjson.list_argv(version)
    if version < (23, 2):
        assert argv == ("sinfo", "--json")
    else:
        assert argv == ("scontrol", "--json=v0.0.45", "show", "node")
        assert slurmjson.list_argv(version, "v0.0.40")[1] == "--json=v0.0.40"


def test_no_version_in_scontrols_answer_is_one_line():
    with pytest.raises(slurmjson.UnsupportedSlurmJson, match="no Slurm release"):
        slurmjson.parse_version("scontrol: fatal: Could not establish a configuration source")


def test_a_missing_data_parser_is_recognized():
    said = (
        "scontrol: error: load_plugins: unable to find plugin: data_parser/v0.0.43 "
        "scontrol: error: data_parser_g_new: failure loading plugins"
    )
    assert slurmjson.missing_parser(said) and not slurmjson.missing_parser("Invalid node name")


def test_a_reason_24_11_keeps_on_a_resumed_node_is_a_leftover_not_a_drain():
    """Measured on 24.11.5: NHC drained n2, then resumed it; scontrol still shows NHC's
    reason on the idle node (22.05 clears it on resume). Read as 22.05 would show it: no
    reason, so the node is neither someone else's nor fenced."""
    raw = json.loads(text("24.11.5-show-node-resumed.json"))["nodes"][0]
    assert raw["state"] == ["IDLE"] and raw["reason"].startswith("NHC: ")
    [n2] = slurmjson.node_list(text("24.11.5-show-node-resumed.json"), "t")
    assert (n2["state"], n2["reason"], n2["reason_set_by_user"], n2["reason_changed_at"]) == (
        "idle",
        "",
        "",
        0,
    )


def test_26_05_clears_the_reason_on_resume():
    """Measured on 26.05.5: NHC drained n2, then resumed it; 26.05 shows no reason on the
    idle node (as 22.05, unlike 24.11), and the parser reads it so."""
    raw = json.loads(text("26.05.5-show-node-resumed.json"))["nodes"][0]
    assert raw["state"] == ["IDLE"] and raw["reason"] == ""
    [n2] = slurmjson.node_list(text("26.05.5-show-node-resumed.json"), "t")
    assert (n2["state"], n2["reason"], n2["reason_changed_at"]) == ("idle", "", 0)


@pytest.mark.parametrize(
    "state,kept",
    [
        (["IDLE", "DRAIN"], True),
        (["MIXED", "DRAIN"], True),
        (["DOWN"], True),
        (["DOWN", "NOT_RESPONDING"], True),
        (["IDLE", "REBOOT_REQUESTED"], True),
        (["UNKNOWN"], True),
        (["IDLE", "FAIL"], True),
        (["IDLE"], False),
        (["ALLOCATED"], False),
        (["IDLE", "NOT_RESPONDING"], False),
        (["MIXED", "PLANNED"], False),
    ],
)
def test_which_states_keep_their_reason(state, kept):
    doc = json.loads(text("24.11.5-show-node-resumed.json"))
    doc["nodes"][0]["state"] = state
    [n2] = slurmjson.node_list(json.dumps(doc), "t")
    assert bool(n2["reason"]) is kept
