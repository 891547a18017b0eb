"""The controller claim on slurmctld (model/controllerclaim.py): who may act beside whom,
and the claim's reading from Extra (adapters/slurmclaim.py), on SlurmNode values."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetmedic.adapters.slurm import SlurmNode
from fleetmedic.adapters.slurmclaim import anchor, read_claims
from fleetmedic.model.controllerclaim import CLAIM_KEY, FRESH_FOR, Claim, conflict

NOW = 1_800_000_000.0
SHARED, LOCAL = "7d0c6f1e-shared", "0a9b8c7d-local"


def claim(store=SHARED, holder="bastion-a-101", elected=True, age=10.0, node="n1") -> Claim:
    return Claim(store, holder, elected, NOW - age, node)


def test_a_standby_of_the_same_store_may_start():
    assert conflict([claim()], store=SHARED, holder="bastion-b-7", elected=True, now=NOW) is None


def test_another_store_is_refused_in_one_line_naming_both_and_the_node():
    why = conflict([claim()], store=LOCAL, holder="bastion-b-7", elected=True, now=NOW)
    assert why and "\n" not in why
    assert "bastion-a-101" in why and "7d0c6f1e" in why and "0a9b8c7d" in why
    assert "Slurm node n1" in why and "slurm.state_dir" in why and "lapses at" in why


@pytest.mark.parametrize("mine,theirs", [(False, True), (True, False), (False, False)])
def test_without_leader_election_on_both_sides_even_the_same_store_is_refused(mine, theirs):
    why = conflict([claim(elected=theirs)], store=SHARED, holder="b", elected=mine, now=NOW)
    assert why and "leader election is off" in why


def test_a_lapsed_claim_and_ones_own_claim_do_not_count():
    old = claim(store=LOCAL, age=FRESH_FOR + 1)
    mine = claim(store=LOCAL, holder="me")
    assert conflict([old, mine], store=SHARED, holder="me", elected=True, now=NOW) is None


def test_a_claim_from_a_clock_that_runs_ahead_counts():
    ahead = claim(store=LOCAL, age=-120)  # written two minutes "in the future"
    assert conflict([ahead], store=SHARED, holder="b", elected=True, now=NOW)


@given(st.floats(min_value=-1e4, max_value=1e4), st.booleans(), st.booleans(), st.booleans())
def test_the_rule(age, same_store, mine_elected, theirs_elected):
    c = claim(store=SHARED if same_store else LOCAL, elected=theirs_elected, age=age)
    why = conflict([c], store=SHARED, holder="b", elected=mine_elected, now=NOW)
    allowed = age >= FRESH_FOR or (same_store and mine_elected and theirs_elected)
    assert (why is None) == allowed


def node(name: str, extra: str = "", reason: str = "") -> SlurmNode:
    return SlurmNode.from_json({"name": name, "extra": extra, "reason": reason})


def test_claims_are_read_beside_the_record_and_junk_is_skipped():
    good = json.dumps({"fleetmedic": {"k": "v"}, CLAIM_KEY: claim().encode()})
    junk = json.dumps({CLAIM_KEY: {"store": "", "holder": "x", "elected": True, "at": 1}})
    claims = read_claims([node("n1", good), node("n2", junk), node("n3", "not json")])
    assert claims == [claim(node="n1")]
    assert Claim.decode({**claim().encode(), "at": True}) is None
    assert Claim.decode({**claim().encode(), "elected": "yes"}) is None


def test_the_anchor_is_the_first_node_that_can_carry_the_claim():
    nodes = [
        node("n3"),
        node("n1", "RMA 4711 (not json)"),
        node("n2", reason="NHC: check_hw_ib: port down"),
        node("n4", reason="fleetmedic: reboot: xid 79"),
    ]
    assert anchor(nodes, "fleetmedic:").name == "n3"
    assert anchor(nodes[1:3], "fleetmedic:") is None
