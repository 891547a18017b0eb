"""Leases judged by the observer's clock (adapters/lease.py's Observer), and a successor
taking its predecessor's node Leases: what makes the leader Lease of a Slurm cluster safe
between bastions whose clocks differ. On the real file store; time is the Observer's
clock (monotonic, passed in) and the holders' renewTime (their wall clocks, written in the
Lease), set apart on purpose."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fleetmedic.adapters.filestore import FileStore
from fleetmedic.adapters.lease import MICROTIME, Lease, Observer
from fleetmedic.controller.leadership import Leadership
from fleetmedic.errors import ConfigError, TemporaryError
from fleetmedic.model.config.sections import LeaderElectionConfig

NS = "fleetmedic"
DURATION = 10


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path):
    return FileStore(tmp_path / "store")


def skew(store: FileStore, name: str, seconds: float) -> None:
    """Rewrite the holder's renewTime as a clock ``seconds`` ahead of ours would have."""
    lease = store.get_lease(NS, name)
    t = datetime.now(UTC) + timedelta(seconds=seconds)
    lease["spec"]["renewTime"] = t.strftime(MICROTIME)
    store.replace_lease(NS, lease)


def test_a_holder_whose_clock_runs_behind_is_not_taken_over_early(store):
    """The holder's clock is 15 s behind: by wall clocks its Lease has expired. A
    candidate that sees it renewed (changed) keeps out; only a Lease left unchanged for
    its whole duration on the candidate's own clock is free."""
    clock = Clock()
    a = Lease(store, NS, "leader", "a", DURATION)
    assert a.try_acquire()
    skew(store, "leader", -(DURATION + 5))  # a's clock 15 s behind ours: "expired"
    plain = Lease(store, NS, "leader", "plain", DURATION)
    assert plain.holder_of(store.get_lease(NS, "leader")) is None  # trusts the clocks
    b = Lease(store, NS, "leader", "b", DURATION, observer=Observer(clock))
    assert not b.try_acquire()  # first sight: a holds it
    clock.now += DURATION - 1
    assert not b.try_acquire()  # unchanged for 9 s: still a's
    skew(store, "leader", -(DURATION + 5))  # a renews (behind-running clock again)
    clock.now += 5
    assert not b.try_acquire()  # it changed: the count starts again
    clock.now += DURATION - 1
    assert not b.try_acquire()
    clock.now += 1  # unchanged for a whole duration on b's clock: a is gone
    assert b.try_acquire()
    assert b.took_over_from == "a"
    assert store.get_lease(NS, "leader")["spec"]["holderIdentity"] == "b"


def test_a_holder_whose_clock_runs_ahead_is_still_taken_over_once_silent(store):
    """A dead holder whose clock ran ahead wrote a renewTime in our future: wall clocks
    would keep it for that long too; the observer frees it after one duration."""
    clock = Clock()
    assert Lease(store, NS, "leader", "a", DURATION).try_acquire()
    skew(store, "leader", 3600)
    b = Lease(store, NS, "leader", "b", DURATION, observer=Observer(clock))
    assert not b.try_acquire()
    clock.now += DURATION
    assert b.try_acquire()


def test_a_lease_dead_for_twice_its_duration_is_free_at_first_sight(store):
    """A controller started long after the last holder died need not wait a duration."""
    assert Lease(store, NS, "leader", "a", DURATION).try_acquire()
    skew(store, "leader", -(2 * DURATION + 1))
    b = Lease(store, NS, "leader", "b", DURATION, observer=Observer(Clock()))
    assert b.try_acquire() and b.took_over_from == "a"


def test_a_released_lease_is_free_at_once_and_names_no_predecessor(store):
    a = Lease(store, NS, "leader", "a", DURATION)
    assert a.try_acquire()
    a.release()
    b = Lease(store, NS, "leader", "b", DURATION, observer=Observer(Clock()))
    assert b.try_acquire() and b.took_over_from is None


CFG = LeaderElectionConfig(
    lease_duration=DURATION, renew_deadline=6, retry_period=2, node_lease_duration=DURATION
)


def test_a_successor_takes_its_predecessors_node_leases_and_no_one_elses(store):
    """b takes over the leader Lease from a dead a: the node Lease a held (mid-repair) is
    b's at once; a node Lease held by a person's ad-hoc run is still refused."""
    clock = Clock()
    a = Leadership(store, CFG, "a")  # type: ignore[arg-type]
    assert a.leading() and a.hold("n1")
    adhoc = Lease(store, NS, "fleetmedic-node-n2", "adhoc-run", DURATION)
    assert adhoc.try_acquire()
    b = Leadership(store, CFG, "b", observe=True)  # type: ignore[arg-type]
    assert b.observer is not None
    b.observer.clock = clock
    assert not b.leading() and not b.hold("n1")  # (b does not lead: a holds it)
    clock.now += DURATION  # a died: nothing it holds has changed for a whole duration
    b._next_renew = 0.0
    assert b.leading() and b.predecessor == "a"
    assert b.hold("n1")  # a's: free to its successor at once
    assert store.get_lease(NS, "fleetmedic-node-n1")["spec"]["holderIdentity"] == "b"
    assert not b.hold("n2")  # the ad-hoc run's is not


def test_without_observe_a_leader_never_inherits(store):
    a = Leadership(store, CFG, "a")  # type: ignore[arg-type]
    assert a.leading() and a.hold("n1")
    lease = store.get_lease(NS, CFG.lease_name)
    lease["spec"]["renewTime"] = (datetime.now(UTC) - timedelta(seconds=60)).strftime(MICROTIME)
    store.replace_lease(NS, lease)
    b = Leadership(store, CFG, "b")  # type: ignore[arg-type]
    assert b.leading() and b.predecessor == "a"
    assert not b.hold("n1")  # a's node Lease is waited out as before


def test_a_guard_that_refuses_stops_the_leader_and_gives_the_lease_up(store):
    """The cluster claim (kinds/slurmha.py) runs as Leadership's guard after each take
    or renewal: a PermanentError there stops acting at once (on_lost), frees the Lease
    for a rightly configured standby, and is raised to end the loop in one line."""
    said: list[str] = []
    verdict: list[BaseException | None] = [None]

    def guard() -> None:
        if verdict[0] is not None:
            raise verdict[0]

    a = Leadership(  # type: ignore[arg-type]
        store, CFG, "a", guard=guard, on_gained=lambda: said.append("gained"),
        on_lost=lambda: said.append("lost"),
    )  # fmt: skip
    assert a.leading() and said == ["gained"]
    verdict[0] = TemporaryError("slurmctld down")  # cannot check now: keeps leading
    a._next_renew = 0.0
    assert a.leading() and said == ["gained"]
    verdict[0] = ConfigError("another controller (x) acts on this Slurm cluster")
    a._next_renew = 0.0
    with pytest.raises(ConfigError, match="another controller"):
        a.leading()
    assert said == ["gained", "lost"] and not a.is_leading
    assert store.get_lease(NS, CFG.lease_name)["spec"].get("holderIdentity") is None


def test_a_guard_refusing_the_first_take_frees_the_lease_without_on_lost(store):
    def guard() -> None:
        raise ConfigError("refused")

    lost: list[int] = []
    a = Leadership(store, CFG, "a", guard=guard, on_lost=lambda: lost.append(1))  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        a.leading()
    assert not lost and store.get_lease(NS, CFG.lease_name)["spec"].get("holderIdentity") is None
