"""policy/domains.py and policy/domainnode.py by example: thresholds, windows, closing,
the record, what a node carries, what fenced nodes share."""

from __future__ import annotations

import json
from datetime import timedelta

from policysim import T0, config, make_node

from fleetmedic.model import keys
from fleetmedic.model.nodestate import view
from fleetmedic.policy import domainnode, domains
from fleetmedic.policy.history import stamp

CLIQUE = "nvidia.com/gpu.clique"


def fleet(cfg, fenced: dict[str, str], size: int = 10, clique: str = "a", extra=()):
    """``size`` nodes of one clique (``n0``..), those in ``fenced`` at the given rung."""
    vocab = cfg.vocabulary()
    out = []
    for i in range(size):
        name = f"n{i}"
        taints = [vocab.repair(fenced[name]).as_taint()] if name in fenced else []
        out.append(view(make_node(name, labels={CLIQUE: clique}, taints=taints), vocab))
    return out + list(extra)


def primed(names, at) -> domains.Memory:
    return domains.Memory(True, {n: stamp(at) for n in names})


def test_a_percentage_threshold_is_of_the_domain_rounded_up_and_at_least_two():
    cfg = config(domains=[{"key": CLIQUE, "threshold": "25%"}])
    [d] = cfg.domains
    assert domains.threshold(d, 18) == 5  # 4.5 -> 5
    assert domains.threshold(d, 4) == 2  # 1 -> at least 2
    views = fleet(cfg, {f"n{i}": "reboot" for i in range(4)}, size=18)
    rev = domains.review(views, cfg.domains, T0, primed([f"n{i}" for i in range(4)], T0), ())
    [near] = rev.near
    assert (near.name, len(near.fenced), near.threshold, near.size) == (f"{CLIQUE}=a", 4, 5, 18)
    assert rev.opened == () and set(rev.settling) == {"n0", "n1", "n2", "n3"}


def test_only_fences_within_the_window_count_and_old_ones_never_settle():
    cfg = config(domains=[{"key": CLIQUE, "threshold": 3, "window": "10m"}])
    views = fleet(cfg, {"n0": "reboot", "n1": "reboot", "n2": "manual"})
    mem = domains.Memory(
        True, {"n0": stamp(T0), "n1": stamp(T0), "n2": stamp(T0 - timedelta(minutes=11))}
    )
    rev = domains.review(views, cfg.domains, T0, mem, ())
    assert rev.opened == () and "n2" not in rev.settling
    mem = domains.Memory(True, {**mem.since, "n2": stamp(T0 - timedelta(minutes=9))})
    [inc] = domains.review(views, cfg.domains, T0, mem, ()).opened
    assert inc.nodes == ("n0", "n1", "n2") and "3 of 10 nodes" in inc.why


def test_the_first_look_is_a_baseline_old_fences_open_nothing():
    cfg = config(domains=[{"key": CLIQUE, "threshold": 2}])
    views = fleet(cfg, {"n0": "reboot", "n1": "reboot", "n2": "reboot"})
    rev = domains.review(views, cfg.domains, T0, domains.Memory(), ())
    assert rev.opened == () and rev.settling == {}
    assert rev.memory.since == {"n0": "", "n1": "", "n2": ""}


def test_release_after_hands_the_nodes_back_and_their_fences_do_not_reopen_it():
    cfg = config(domains=[{"key": CLIQUE, "threshold": 2, "release_after": "1h"}])
    views = fleet(cfg, {"n0": "reboot", "n1": "reboot"})
    rev = domains.review(views, cfg.domains, T0, primed(["n0", "n1"], T0), ())
    assert len(rev.opened) == 1
    later = T0 + timedelta(hours=1)
    rev = domains.review(views, cfg.domains, later, rev.memory, rev.open)
    [done] = rev.closed
    assert (done.closed_by, done.closed_at) == ("release_after", stamp(later))
    assert rev.open == () and rev.held == {} and rev.opened == ()
    assert rev.memory.since == {"n0": "", "n1": ""}  # counted once
    rev = domains.review(views, cfg.domains, later + timedelta(seconds=30), rev.memory, ())
    assert rev.opened == ()


def test_an_incident_closes_when_its_label_is_gone_or_its_key_unconfigured():
    cfg = config(domains=[{"key": CLIQUE, "threshold": 2}])
    views = fleet(cfg, {"n0": "reboot", "n1": "reboot"})
    [inc] = domains.review(views, cfg.domains, T0, primed(["n0", "n1"], T0), ()).opened
    other = fleet(cfg, {"n0": "reboot", "n1": "reboot"}, clique="b")
    [gone] = domains.review(other, cfg.domains, T0, primed(["n0"], T0), (inc,)).closed
    assert gone.closed_by == "gone" and "no node carries" in gone.why
    [unconfigured] = domains.review(views, (), T0, primed(["n0"], T0), (inc,)).closed
    assert "no longer a configured domain key" in unconfigured.why


def test_min_healthy_counts_a_domains_sick_nodes_once():
    cfg = config(domains=[{"key": CLIQUE, "threshold": 2}])
    views = fleet(cfg, {"n0": "reboot", "n1": "reboot", "n2": "reboot"})
    rev = domains.review(views, cfg.domains, T0, primed(["n0", "n1", "n2"], T0), ())
    groups = domains.grouped(rev)
    assert groups == dict.fromkeys(("n0", "n1", "n2"), f"{CLIQUE}=a")  # in repair only
    from fleetmedic.policy import plan

    fleet_plan = plan.make_plan(views, [], T0, cfg, count_once=groups)
    assert fleet_plan.fleet.healthy == 7 + 2  # 7 healthy, the three sick count as one


def test_the_record_round_trips_and_an_unreadable_one_reads_as_none():
    inc = domains.Incident(
        CLIQUE, "a", stamp(T0), ("n0", "n1"), running=(("n0", "1/reboot/1"),), why="x"
    )
    assert domains.decode(domains.encode([inc])) == (inc,)
    assert domains.decode("not json") == () and domains.decode('{"a": 1}') == ()
    assert domains.decode('[{"key": "k"}, 7]') == ()
    assert inc.id == f"{CLIQUE}=a@{stamp(T0)}" and inc.open


def test_a_node_keeps_its_last_incidents_and_the_inventory_group_is_safe():
    raw = None
    incs = [
        domains.Incident(CLIQUE, f"c{i}", stamp(T0 + timedelta(hours=i)), ("n0",), why="w")
        for i in range(7)
    ]
    for inc in incs:
        raw = domainnode.node_entry(raw, inc)
    entries = domainnode.on_node(raw)
    assert [e["value"] for e in entries] == ["c2", "c3", "c4", "c5", "c6"]  # the last five
    closed = domains.Incident(**{**incs[6].__dict__, "closed_at": stamp(T0), "closed_by": "me"})
    raw = domainnode.node_entry(raw, closed)
    assert [e["value"] for e in domainnode.open_on_node(raw)] == ["c2", "c3", "c4", "c5"]
    rows = domainnode.timeline_rows(raw)
    assert [r["result"] for r in rows if "c6" in r["what"]] == ["opened", "closed (me)"]
    assert domainnode.inventory_group(CLIQUE, "c-17.x") == "incident_nvidia_com_gpu_clique_c_17_x"
    assert domainnode.on_node("garbage") == [] and domainnode.open_on_node(None) == []


def test_what_fenced_nodes_have_in_common():
    cfg = config()
    vocab = cfg.vocabulary()
    finding = json.dumps({"rule": "sxid-20034", "msg": "NVLink fatal"})
    results = json.dumps(
        {"fabric": {"status": "fail", "detail": "fm down"}, "gpu": {"status": "ok"}}
    )
    ann = {keys.ANN_LAST_FINDING: finding, keys.ANN_LAST_RESULTS: results}
    taint = [vocab.repair("reboot").as_taint()]
    views = [
        view(make_node("a", taints=taint, annotations=ann), vocab),
        view(make_node("b", taints=taint, annotations=ann), vocab),
        view(make_node("c", taints=taint), vocab),
    ]
    shared = domains.common(views)
    assert shared[0] == "fenced at reboot (3 nodes)"
    assert "finding sxid-20034 (2 nodes)" in shared and "check fabric: fail (2 nodes)" in shared
    assert not any("gpu" in s for s in shared)
