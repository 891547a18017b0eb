"""kinds/slurmha.py's ClaimGuard, the rules around the claim's reads and writes (the
real reads and writes on slurmctld are tests/integration/test_slurm_ha.py's): it writes
every RENEW_EVERY seconds, a write that fails never stops the controller, and another
store's fresh claim does."""

from __future__ import annotations

import json

import pytest

from fleetmedic.adapters.slurm import SlurmNode
from fleetmedic.errors import ConfigError, PermanentError
from fleetmedic.kinds.slurmha import RETRY_FAILED_WRITE, ClaimGuard
from fleetmedic.model.controllerclaim import CLAIM_KEY, RENEW_EVERY, Claim


class Nodes:
    """What the guard reads and writes of the cluster: its nodes' Extra, in memory."""

    prefix = "fleetmedic:"

    def __init__(self) -> None:
        self.extra = {"n1": "", "n2": ""}
        self.writes = 0
        self.refuse: Exception | None = None

    def nodes(self, partitions=None) -> list[SlurmNode]:
        return [SlurmNode.from_json({"name": n, "extra": e}) for n, e in self.extra.items()]

    def set_extra_key(self, name: str, key: str, value) -> None:
        if self.refuse:
            raise self.refuse
        doc = json.loads(self.extra[name] or "{}")
        doc[key] = dict(value)
        self.extra[name] = json.dumps(doc)
        self.writes += 1


class Cluster:
    def __init__(self) -> None:
        self.slurm, self.partitions = Nodes(), ()


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def parts():
    cluster, clock = Cluster(), Clock()
    guard = ClaimGuard(cluster, "store-a", "bastion-a", True, clock=clock, monotonic=clock)  # type: ignore[arg-type]
    return cluster.slurm, clock, guard


def test_it_writes_at_once_then_every_renewal(parts):
    slurm, clock, guard = parts
    guard()
    assert slurm.writes == 1 and guard.written_on == "n1"
    claim = Claim.decode(json.loads(slurm.extra["n1"])[CLAIM_KEY])
    assert claim is not None and (claim.store, claim.holder, claim.at) == (
        "store-a",
        "bastion-a",
        1000.0,
    )
    clock.now += RENEW_EVERY - 1
    guard()
    assert slurm.writes == 1
    clock.now += 1
    guard()
    assert slurm.writes == 2


def test_a_failed_write_is_tried_again_and_never_stops_the_controller(parts):
    slurm, clock, guard = parts
    slurm.refuse = PermanentError("scontrol update: Invalid node state specified")
    guard()  # (logged, not raised)
    assert slurm.writes == 0
    slurm.refuse = None
    clock.now += RETRY_FAILED_WRITE
    guard()
    assert slurm.writes == 1


def test_another_stores_fresh_claim_stops_it_and_it_writes_nothing(parts):
    slurm, clock, guard = parts
    other = Claim("store-b", "bastion-c", True, clock.now - 10)
    slurm.extra["n2"] = json.dumps({CLAIM_KEY: other.encode()})
    with pytest.raises(ConfigError, match=r"^stopped acting: another controller \(bastion-c\)"):
        guard()
    with pytest.raises(ConfigError, match="Slurm node n2"):
        guard.check()
    assert slurm.writes == 0 and slurm.extra["n1"] == ""
