"""sdiag's RPC tables, parsed from text a real slurmctld 22.05.8 wrote (tests/data/sdiag,
captured from tests/harness/slurmbig.py's cluster with 200 nodes): ``sdiag-before.txt``
right after start-up, then one ``sinfo --json`` as root, one as ``nobody`` and one
``scontrol update ... state=drain``, then ``sdiag-after.txt``. The bench
(bench/slurm_idle_rpc.py) reads the load as the difference of two such snapshots."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.slurmbig import (
    SdiagError,
    counts_delta,
    hostlist,
    micros_delta,
    node_names,
    parse_sdiag,
    rpc_delta,
)

DATA = Path(__file__).parents[2] / "data" / "sdiag"
BEFORE = (DATA / "sdiag-before.txt").read_text()
AFTER = (DATA / "sdiag-after.txt").read_text()


def test_one_snapshot_by_type_by_user_and_time():
    s = parse_sdiag(BEFORE)
    assert s.taken == 1795748026
    assert s.count == {"REQUEST_PING": 1, "REQUEST_NODE_INFO": 1, "REQUEST_PARTITION_INFO": 1}
    assert s.micros["REQUEST_NODE_INFO"] == 1991
    assert s.user_count == {"root": 3}


def test_the_difference_is_what_ran_between_without_our_own_sdiag():
    before, after = parse_sdiag(BEFORE), parse_sdiag(AFTER)
    # two sinfo --json (a node-info and a partition-info RPC each) and one update; the
    # first snapshot's REQUEST_STATS_INFO is counted in the second and taken out
    assert rpc_delta(before, after) == {
        "REQUEST_NODE_INFO": 2,
        "REQUEST_PARTITION_INFO": 2,
        "REQUEST_UPDATE_NODE": 1,
    }
    assert counts_delta(before.user_count, after.user_count) == {"root": 4, "nobody": 2}
    assert micros_delta(before, after)["REQUEST_NODE_INFO"] == 4516 - 1991
    assert "REQUEST_PING" not in micros_delta(before, after)


def test_counters_that_went_down_are_a_reset_not_a_negative_load():
    with pytest.raises(SdiagError, match="reset"):
        rpc_delta(parse_sdiag(AFTER), parse_sdiag(BEFORE))


def test_snapshots_that_are_not_ours_in_turn_are_refused():
    with pytest.raises(SdiagError, match="fewer than our 2"):
        rpc_delta(parse_sdiag(BEFORE), parse_sdiag(AFTER), own=2)


@pytest.mark.parametrize(
    "text, why",
    [
        ("", "sdiag output at"),
        ("sdiag: error: slurm_get_statistics: Unable to contact slurm controller\n", "at"),
        (AFTER.split("Remote Procedure Call statistics by user")[0], "by user"),
        (AFTER.replace("count:3 ", "count:three "), "does not parse"),
        (AFTER.replace("\troot            (", "\t("), "does not parse"),
        (AFTER.replace("\troot ", "\n"), "none by user"),
    ],
)
def test_output_of_another_shape_is_an_error_not_zero(text, why):
    with pytest.raises(SdiagError, match=why):
        parse_sdiag(text)


def test_the_defined_nodes_and_their_hostlist():
    assert hostlist(2000) == "gpu[0001-2000]" and hostlist(1) == "gpu0001"
    assert node_names(3) == ["gpu0001", "gpu0002", "gpu0003"]
    assert hostlist(12000) == "gpu[00001-12000]" and node_names(12000)[-1] == "gpu12000"
