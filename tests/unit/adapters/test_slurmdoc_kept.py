"""The agent's kept view of its Slurm node (adapters/slurmdoc.py, adapters/slurmcache.py):
a round with nothing to write asks slurmctld nothing while the view is younger than
``read_every``; any write is decided on a fresh read; a view of someone else's drain
refuses a write without asking; the view is shared through a file by the node's agent
processes. Here the Slurm tools are an in-memory stand-in that counts reads and writes;
the same is measured against a real slurmctld with sdiag in
tests/integration/test_slurm_agent.py."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fleetmedic.adapters.slurm import ForeignDrain, Slurm, SlurmNode
from fleetmedic.adapters.slurmdoc import SlurmNodeDocs
from fleetmedic.model import keys, nodeedit
from fleetmedic.model.vocabulary import preset

VOCAB = preset()


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


class CountingSlurm(Slurm):
    """One node in memory; counts what would be Slurm RPCs."""

    def __init__(self) -> None:
        super().__init__(None)
        self.n = SlurmNode.from_json({"name": "n1", "state": "idle"})
        self.reads = self.writes = 0

    def node(self, name: str) -> SlurmNode:
        self.reads += 1
        return self.n

    def fence(self, name, rung, finding, record=None, *, current=None) -> str:
        assert current is self.n, "decided on the node just read"
        self.writes += 1
        self.n = dataclasses.replace(
            self.n, flags=self.n.flags | {"DRAIN"}, reason=f"fleetmedic: {rung}: {finding}"
        )
        self._merge(record or {})
        return self.n.reason

    def record(self, name, values, *, current=None) -> dict:
        assert current is self.n
        self.writes += 1
        self._merge(values)
        return self.n.record

    def _merge(self, values) -> None:
        rec = {**self.n.record, **values}
        rec = {k: v for k, v in rec.items() if v is not None}
        self.n = dataclasses.replace(self.n, extra=json.dumps({"fleetmedic": rec}))


def strike(d: dict) -> None:
    nodeedit.set_annotation(d, keys.ANN_STRIKES, '{"gpu":1,"network":0}')


def nothing(d: dict) -> None:
    nodeedit.set_annotation(d, keys.ANN_STRIKES, '{"gpu":0,"network":0}')


@pytest.fixture
def world():
    clock, slurm = Clock(), CountingSlurm()
    slurm._merge({keys.ANN_STRIKES: '{"gpu":0,"network":0}'})
    return clock, slurm, SlurmNodeDocs(slurm, VOCAB, read_every=300, clock=clock)


def test_rounds_with_nothing_to_write_ask_nothing_until_the_view_is_old(world):
    clock, slurm, docs = world
    docs.get_node("n1")
    docs.update_node("n1", nothing)
    assert (slurm.reads, slurm.writes) == (1, 0)
    for _ in range(4):  # four more rounds, a minute apart
        clock.t += 60
        docs.get_node("n1")
        docs.update_node("n1", nothing)
    assert (slurm.reads, slurm.writes) == (1, 0)
    clock.t += 60  # 300 s since the read: asked again
    docs.get_node("n1")
    assert slurm.reads == 2


def test_a_write_is_decided_on_a_fresh_read_and_its_result_kept(world):
    clock, slurm, docs = world
    docs.get_node("n1")
    docs.update_node("n1", strike)
    assert (slurm.reads, slurm.writes) == (2, 1)
    clock.t += 60
    docs.update_node("n1", strike)  # the same again: nothing to write, nothing asked
    assert (slurm.reads, slurm.writes) == (2, 1)


def test_a_change_made_by_someone_else_since_is_seen_by_the_write(world):
    _, slurm, docs = world
    docs.get_node("n1")
    # the controller fenced the node meanwhile: the agent's view does not know it
    slurm.n = dataclasses.replace(slurm.n, flags={"DRAIN"}, reason="fleetmedic: reboot: x")

    def fence_reset(d: dict) -> None:
        if VOCAB.repair_state_of(d["spec"]["taints"]) is None:
            nodeedit.add_taint(d, VOCAB.reset)

    after = docs.update_node("n1", fence_reset)
    assert VOCAB.repair_state_of(after["spec"]["taints"]) == "reboot", "never lowered"
    assert slurm.writes == 0 and slurm.reads == 2


def test_someone_elses_drain_is_kept_too_and_refuses_without_asking(world):
    clock, slurm, docs = world
    slurm.n = dataclasses.replace(slurm.n, flags={"DRAIN"}, reason="NHC: ib0 down")
    with pytest.raises(ForeignDrain, match="NHC"):
        docs.update_node("n1", strike)
    clock.t += 60
    with pytest.raises(ForeignDrain, match="NHC"):
        docs.update_node("n1", strike)
    assert (slurm.reads, slurm.writes) == (1, 0)


def test_read_every_zero_reads_every_time():
    slurm = CountingSlurm()
    docs = SlurmNodeDocs(slurm, VOCAB)
    docs.get_node("n1")
    docs.update_node("n1", nothing)
    assert slurm.reads == 2


def test_the_node_processes_share_the_view_through_a_file(tmp_path):
    clock, slurm = Clock(), CountingSlurm()
    daemon = SlurmNodeDocs(slurm, VOCAB, read_every=300, cache_dir=tmp_path, clock=clock)
    daemon.get_node("n1")
    clock.t += 30
    check = SlurmNodeDocs(slurm, VOCAB, read_every=300, cache_dir=tmp_path, clock=clock)
    assert check.get_node("n1") == daemon.get_node("n1")
    assert slurm.reads == 1, "the health check's run asked nothing"
    other = SlurmNodeDocs(CountingSlurm(), VOCAB, read_every=300, cache_dir=tmp_path, clock=clock)
    other.slurm.env["SLURM_CONF"] = "/another/cluster/slurm.conf"
    other.cache.cluster = "/another/cluster/slurm.conf"
    other.get_node("n1")
    assert other.slurm.reads == 1, "another cluster's n1 is another node"


GOOD = {"v": 1, "node": "n1", "cluster": "", "at": 1_000_000.0, "foreign": "", "doc": {}}


@pytest.mark.parametrize(
    "body",
    [
        "",
        "{",
        json.dumps({**GOOD, "node": "n2"}),
        json.dumps({**GOOD, "cluster": "/elsewhere/slurm.conf"}),
        json.dumps({**GOOD, "at": 2_000_000.0}),  # in the future: a clock set back
        json.dumps({**GOOD, "doc": "x"}),
    ],
)
def test_a_bad_or_future_view_file_is_no_view(tmp_path, body):
    clock, slurm = Clock(), CountingSlurm()
    docs = SlurmNodeDocs(slurm, VOCAB, read_every=300, cache_dir=tmp_path, clock=clock)
    path = docs.cache.path("n1")
    path.write_text(json.dumps(GOOD))
    assert docs.cache.get("n1", 300) is not None  # (the good one is a view)
    path.write_text(body)
    docs.cache._mem.clear()
    docs.get_node("n1")
    assert slurm.reads == 1
