"""Domain incidents on the simulated fleet (policysim), driven as the controller drives
them: each cycle reviews the domains (policy/domains.py), holds what they say, and plans
the rest; under random fences, cures, crashes and hand releases.

- never a per-node rung on a held node: a node an incident holds gets no action, except
  the rung that was under way on it when the incident opened (it finishes);
- never two incidents for one domain;
- an incident always closes when its nodes pass;
- a node in two domains' incidents is held by both.
"""

from __future__ import annotations

import random
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policysim import World, config

from fleetmedic.model import keys
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy import domains, plan
from fleetmedic.policy.actions import Kind

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CLIQUE, RACK = "nvidia.com/gpu.clique", "example.com/rack"


class DomainWorld(World):
    """A World whose cycle is the controller's with domains configured."""

    def __init__(self, cfg, rng) -> None:
        super().__init__(cfg, rng)
        self.memory = domains.Memory()
        self.incidents: tuple[domains.Incident, ...] = ()
        self.released: list[domains.Incident] = []  # closed by hand since the last look
        self.opened: list[domains.Incident] = []
        self.closed: list[domains.Incident] = []
        self.violations: list[str] = []
        self.last: domains.Review | None = None
        self.index = domains.Index(tuple(d.key for d in cfg.domains))

    def cycle(self, step: float = 30.0, paused: str | None = None):
        views = self.views()
        # every other cycle with the index kept across cycles (the controller's way),
        # the others with a fresh one: both must give the same review
        index = self.index if len(self.opened) % 2 == 0 else None
        rev = domains.review(
            views,
            self.cfg.domains,
            self.now,
            self.memory,
            (*self.incidents, *self.released),
            index,
        )
        self.released = []
        self.memory, self.incidents, self.last = rev.memory, rev.open, rev
        self.opened += rev.opened
        self.closed += rev.closed
        names = [i.name for i in rev.open]
        if len(names) != len(set(names)):
            self.violations.append(f"two incidents for one domain: {names}")
        holds = domains.holds(rev)
        decisions = plan.decide_all(views, self.now, self.cfg)
        admitted = plan.make_plan(
            views,
            decisions,
            self.now,
            self.cfg,
            paused=paused,
            holds=holds,
            count_once=domains.grouped(rev),
        ).admission.admitted
        by_name = {v.name: v for v in views}
        running = {(n, m) for i in rev.open for n, m in i.running}
        for action in admitted:
            if action.node in rev.held:
                marker = domains._marker(by_name[action.node])
                if action.new_work or (action.node, marker) not in running:
                    self.violations.append(f"{action.describe()} on a held node")
            if action.node in rev.settling and action.kind != Kind.NONE:
                self.violations.append(f"{action.describe()} while settling")
            self.execute(action)
        self.now += timedelta(seconds=step)
        return list(admitted)

    def fence(self, name: str) -> None:
        node = self.nodes[name]
        if self.view(name).state == "healthy":
            node["spec"]["taints"] = [
                *node["spec"]["taints"],
                self.vocab.repair("reboot").as_taint(),
            ]

    def mend(self, names) -> None:
        """The shared part is mended and a human returns its nodes (as `fleetmedic reset`)."""
        for name in names:
            node = self.nodes[name]
            node["spec"]["taints"] = []
            ann = node["metadata"]["annotations"]
            for key in (keys.ANN_IN_FLIGHT, keys.ANN_ESCALATED):
                ann.pop(key, None)
            self.truth[name].fault = "none"

    def release_by_hand(self, name: str) -> None:
        for inc in self.incidents:
            if inc.name == name:
                self.released.append(
                    domains.Incident(**{**inc.__dict__, "closed_at": "x", "closed_by": "a human"})
                )
        self.incidents = tuple(i for i in self.incidents if i.name != name)


def build(sizes, threshold, seed, settle=60, racks=True) -> DomainWorld:
    rack = {"key": RACK, "threshold": "50%", "window": "10m", "settle": settle}
    cfg = config(
        domains=[
            {"key": CLIQUE, "threshold": threshold, "window": "10m", "settle": settle},
            *([rack] if racks else []),
        ],
        safety__max_concurrent=4,
        safety__max_concurrent_percent=100,
    )
    w = DomainWorld(cfg, random.Random(seed))
    i = 0
    for c, size in enumerate(sizes):
        for _ in range(size):
            # two racks cut across the cliques: a node can be in two incidents
            labels = {CLIQUE: f"c{c}", RACK: f"r{i % 2}"}
            w.add(f"n{i}", fault="reboot", labels=labels)
            i += 1
    return w


fleets = st.lists(st.integers(1, 6), min_size=1, max_size=4)
events = st.lists(  # (cycle, what, which): fence a node, mend a clique, release a clique
    st.tuples(
        st.integers(0, 40), st.sampled_from(["fence", "fence", "mend", "release"]), st.integers()
    ),
    max_size=25,
)


def drive(w: DomainWorld, spec, cycles: int = 60) -> None:
    names = sorted(w.nodes, key=lambda n: int(n[1:]))
    cliques = sorted({w.nodes[n]["metadata"]["labels"][CLIQUE] for n in names})
    for t in range(cycles):
        for when, what, which in spec:
            if when != t:
                continue
            if what == "fence":
                w.fence(names[which % len(names)])
            elif what == "mend":
                clique = cliques[which % len(cliques)]
                w.mend([n for n in names if w.nodes[n]["metadata"]["labels"][CLIQUE] == clique])
            else:
                w.release_by_hand(domains.name_of(CLIQUE, cliques[which % len(cliques)]))
        w.crash_rate = 0.1 if t % 7 == 3 else 0.0
        w.cycle()
        assert not w.violations, w.violations


@FAST
@given(fleets, st.integers(2, 4), events, st.integers(0, 2**32))
def test_no_rung_on_a_held_node_and_one_incident_per_domain(sizes, threshold, spec, seed):
    w = build(sizes, threshold, seed)
    drive(w, spec)
    # every incident opened was for a domain at its threshold, and each was unique while open
    for inc in w.opened:
        assert len(inc.nodes) >= 2


@FAST
@given(fleets, st.integers(2, 4), events, st.integers(0, 2**32))
def test_an_incident_always_closes_when_its_nodes_pass(sizes, threshold, spec, seed):
    w = build(sizes, threshold, seed)
    drive(w, spec)
    for inc in w.incidents:  # whatever is still open: its nodes pass now
        w.mend(
            [n for n, v in ((n, w.view(n)) for n in w.nodes) if v.labels.get(inc.key) == inc.value]
        )
    w.cycle()
    assert w.incidents == (), [i.name for i in w.incidents]
    assert not w.violations, w.violations


def test_a_clique_that_fences_together_opens_one_incident_and_no_node_is_repaired():
    w = build([6, 1], 3, 0, racks=False)
    w.cycle()  # the baseline
    for n in ("n0", "n1", "n2", "n3"):
        w.fence(n)
        w.cycle()
    [inc] = w.opened
    assert inc.name == f"{CLIQUE}=c0" and inc.nodes == ("n0", "n1", "n2")
    # while it is open: nothing on its nodes, and the fourth joined it (held, no rung)
    for _ in range(20):
        w.cycle()
    assert all(not w.history(n) for n in ("n0", "n1", "n2", "n3")), "no rung ran"
    assert all(keys.ANN_IN_FLIGHT not in w.nodes[n]["metadata"]["annotations"] for n in w.nodes)
    assert set(w.last.held) >= {f"n{i}" for i in range(6)}
    assert not w.violations


def test_a_lone_failure_waits_settle_then_is_repaired_as_usual():
    w = build([6, 1], 3, 0, settle=60, racks=False)
    w.cycle()
    w.fence("n6")  # the one-node clique: too small ever to open an incident
    w.fence("n0")
    w.cycle()
    assert "n0" in w.last.settling and "n6" not in w.last.settling
    for _ in range(40):
        w.cycle()
    assert [a.result for a in w.history("n0")] == ["pass"]
    assert [a.result for a in w.history("n6")] == ["pass"]
    assert w.opened == [] and not w.violations


def test_a_node_in_two_incidents_is_held_by_both_and_released_by_the_last():
    # two cliques of 4 across two racks (even nodes rack r0, odd nodes r1)
    w = build([4, 4], 2, 0)
    w.cycle()
    for n in ("n0", "n2", "n1"):  # clique c0 (2 of them rack r0, one r1) and rack r0 at 50 %
        w.fence(n)
    w.fence("n4")
    w.fence("n6")
    w.cycle()
    held = w.last.held
    assert set(held["n0"]) == {f"{CLIQUE}=c0", f"{RACK}=r0"}, held
    w.release_by_hand(f"{CLIQUE}=c0")
    w.cycle()
    assert w.last.held["n0"] == (f"{RACK}=r0",), "still held by the rack's incident"
    assert "n1" not in w.last.held, "n1's only incident was released"
    assert not w.violations


def test_a_rung_under_way_finishes_but_the_next_rung_is_held():
    w = build([5], 3, 0, racks=False)
    w.cycle()
    w.fence("n0")
    for _ in range(4):  # past settle: n0's reboot rung starts
        w.cycle()
    assert keys.ANN_IN_FLIGHT in w.nodes["n0"]["metadata"]["annotations"]
    w.truth["n0"].fault = "never"  # its reboot will not cure it
    for n in ("n1", "n2"):
        w.fence(n)
    w.cycle()
    [inc] = w.opened
    assert dict(inc.running).get("n0", "").endswith("/reboot/1"), inc.running
    for _ in range(30):
        w.cycle()
    results = [(a.step, a.result) for a in w.history("n0")]
    assert results and results[0][0] == "reboot", results  # the running rung finished
    assert all(step == "reboot" for step, _ in results), "no next rung while held"
    assert not w.violations


def views_of(w: World) -> list[NodeView]:
    return w.views()
