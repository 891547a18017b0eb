"""A write refused because someone else drained the Slurm node (ForeignDrain, raised by
adapters/slurmdoc.py after the edit ran and before anything is written): the writer's
outcome is held (nothing fenced, nothing marked, no slow-network change), it says so in
one log line per distinct refusal, and it counts no write. The real refusal runs against
slurmctld in tests/integration/test_slurm_agent.py."""

from __future__ import annotations

import logging

from agent_helpers import VOCAB, MemoryKube

from fleetmedic.adapters.slurm import ForeignDrain
from fleetmedic.agent.watermark import Mark
from fleetmedic.agent.writer import NodeWriter
from fleetmedic.policy.strikes import Observation


class RefusingKube(MemoryKube):
    def update_node(self, name: str, mutate) -> dict:
        mutate(self.get_node(name))
        raise ForeignDrain(f"Slurm node {name}: drained by someone else ('NHC: x')")


def test_a_refused_write_is_held_and_said_once(caplog):
    kube = RefusingKube()
    wrote: list[int] = []
    w = NodeWriter(kube, "n1", VOCAB, on_write=lambda: wrote.append(1))
    obs = Observation("kernel", "problem", "Xid 79 (xid.79)", "reboot")
    mark = Mark(boot="b", seg="", fp="f", n=3, rule="xid.79")
    with caplog.at_level(logging.WARNING, logger="fleetmedic.agent"):
        first = w.record_finding(obs, lambda acted: mark)
        second = w.record_finding(obs, lambda acted: mark)
    for out in (first, second):
        assert out.held and "NHC: x" in out.held
        assert out.fenced is None and out.marked is None and out.raised is None
        assert out.slow_network_changed is None
    said = [r.getMessage() for r in caplog.records if "not writing n1" in r.getMessage()]
    assert len(said) == 1, said
    assert wrote == [] and kube.writes == 0 and kube.events == []
