"""policy/domains_play.py: a domain incident's playbook runs once per incident (also
across a restart: the record says where it was), every node is verified after it, those
that pass return through the ladder's own return, the rest enter their own ladders."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policysim import T0, config, make_node

from fleetmedic.model import keys
from fleetmedic.model.nodestate import view
from fleetmedic.policy import domains, domains_play, ladder
from fleetmedic.policy.actions import HEALTHY, LOST, Kind
from fleetmedic.policy.history import decode, stamp

CLIQUE = "nvidia.com/gpu.clique"
PLAYBOOK = {"playbook": "fm.yml", "timeout": "10m"}


def cfg_with(action=None, **kw):
    return config(
        domains=[{"key": CLIQUE, "threshold": 3, "action": action or PLAYBOOK, **kw}],
        ladder={"order": ["reboot", "reimage", "manual"]},
    )


def fleet(cfg, fenced, size=6):
    vocab = cfg.vocabulary()
    out = []
    for i in range(size):
        name = f"n{i}"
        taints = [vocab.repair("reboot").as_taint()] if name in fenced else []
        out.append(view(make_node(name, labels={CLIQUE: "a"}, taints=taints), vocab))
    return out


def opened(cfg, views, fenced):
    mem = domains.Memory(True, {n: stamp(T0) for n in fenced})
    [inc] = domains.review(views, cfg.domains, T0, mem, ()).opened
    return inc, mem


def restart(incidents):
    """What a restarted controller reads back from the pause ConfigMap."""
    return domains.decode(domains.encode(incidents))


def test_an_incident_with_a_playbook_action_records_it_pending_and_hold_records_none():
    cfg = cfg_with()
    views = fleet(cfg, {"n0", "n1", "n2"})
    inc, _ = opened(cfg, views, ["n0", "n1", "n2"])
    assert inc.play == domains_play.Play("fm.yml")
    hold = cfg_with(action="hold")
    assert opened(hold, fleet(hold, {"n0", "n1", "n2"}), ["n0", "n1", "n2"])[0].play is None


def test_the_playbook_runs_once_over_the_fenced_nodes_and_a_restart_resumes_the_same_request():
    cfg = cfg_with()
    views = fleet(cfg, {"n0", "n1", "n2"})
    inc, _ = opened(cfg, views, ["n0", "n1", "n2"])
    step = domains_play.next_step(inc.play, ["n0", "n1", "n2"])
    assert (step.what, step.nodes, step.resumed) == ("run", ("n0", "n1", "n2"), False)
    running = dataclasses.replace(inc, play=domains_play.began(inc.play, step.nodes, "run-1", T0))
    # killed mid-run: the record says running; the restart runs it again, same request id
    [back] = restart([running])
    assert back.id == inc.id and back.play == running.play
    again = domains_play.next_step(back.play, ["n0", "n1", "n2", "n3"])  # n3 fenced later
    assert (again.what, again.nodes, again.resumed) == ("run", ("n0", "n1", "n2"), True)
    assert domains_play.request_id(back.id) == domains_play.request_id(inc.id)
    resumed = domains_play.began(back.play, again.nodes, "run-2", T0 + timedelta(minutes=3))
    assert resumed.runs == 2 and resumed.started_at == stamp(T0)  # its timeout: from the first
    # its outcome recorded: never the playbook again, whatever follows
    after = domains_play.ran(resumed, {"n0": "ok", "n1": "ok", "n2": "failed"}, "", T0, 600)
    for play in (after, *restart([dataclasses.replace(inc, play=after)])[0:1]):
        p = play if isinstance(play, domains_play.Play) else play.play
        assert domains_play.next_step(p, ["n0", "n1", "n2"]).what == "verify"


def test_every_node_is_verified_after_it_whatever_the_playbook_said_of_it():
    play = domains_play.began(domains_play.Play("fm.yml"), ["n0", "n1", "n2"], "r", T0)
    after = domains_play.ran(play, {"n0": "ok", "n1": "failed", "n2": "unreachable"}, "x", T0, 60)
    step = domains_play.next_step(after, ["n0", "n1", "n2"])
    assert (step.what, step.nodes) == ("verify", ("n0", "n1", "n2"))
    assert after.outcome.startswith("1 of 3 node(s) ok")
    done = domains_play.verified(after, {"n0": "ok", "n1": "ok"}, T0)  # n2: no result
    assert (done.status, done.passed, done.failed) == ("done", ("n0", "n1"), ("n2",))
    assert domains_play.next_step(done, []).what == "finish"
    line = domains_play.summary(done)
    assert "returned to service: n0, n1" in line and "to their own ladders: n2" in line


def test_a_lost_run_is_resumed_until_its_timeout_then_verified():
    play = domains_play.began(domains_play.Play("fm.yml"), ["n0", "n1"], "r", T0)
    lost = {"n0": LOST, "n1": LOST}
    soon = domains_play.ran(play, lost, "execution node gone", T0 + timedelta(seconds=30), 600)
    assert soon.status == domains_play.RUNNING
    assert domains_play.next_step(soon, ["n0", "n1"]).resumed
    late = domains_play.ran(play, lost, "execution node gone", T0 + timedelta(minutes=11), 600)
    assert late.status == domains_play.VERIFY


def test_a_rung_under_way_on_one_of_its_nodes_finishes_first():
    play = domains_play.Play("fm.yml")
    step = domains_play.next_step(play, ["n0", "n1", "n2"], busy=["n1"])
    assert step.what == "wait" and "n1" in step.why
    assert domains_play.next_step(play, []).what == "wait"


def test_the_incident_stays_open_while_its_playbook_runs_even_if_its_nodes_look_healthy():
    cfg = cfg_with()
    fenced = ["n0", "n1", "n2"]
    inc, mem = opened(cfg, fleet(cfg, set(fenced)), fenced)
    running = dataclasses.replace(inc, play=domains_play.began(inc.play, fenced, "r", T0))
    healthy = fleet(cfg, set())
    rev = domains.review(healthy, cfg.domains, T0 + timedelta(seconds=5), mem, (running,))
    assert rev.closed == () and [i.id for i in rev.open] == [inc.id]
    pending = dataclasses.replace(inc)  # not started: nodes that pass close it as before
    rev = domains.review(healthy, cfg.domains, T0 + timedelta(seconds=5), mem, (pending,))
    assert [c.closed_by for c in rev.closed] == ["passed"]


def test_nodes_that_pass_return_through_the_ladder_and_the_failing_enter_their_own_ladder():
    cfg = cfg_with()
    fenced = ["n0", "n1", "n2"]
    views = fleet(cfg, set(fenced))
    inc, mem = opened(cfg, views, fenced)
    play = domains_play.began(inc.play, fenced, "r", T0)
    play = domains_play.ran(play, dict.fromkeys(fenced, "ok"), "", T0, 600)
    play = domains_play.verified(play, {"n0": "ok", "n1": "ok", "n2": "failed"}, T0)
    by = {v.name: v for v in views}
    upd = domains_play.returning(by["n0"], inc.name, play, T0, cfg)
    assert upd.state == HEALTHY and upd.uncordon and upd.expect_state == "reboot"
    [entry] = upd.append
    assert (entry.step, entry.result, entry.ep) == (domains_play.STEP, "pass", 1)
    assert inc.name in entry.message and "fm.yml" in entry.message
    assert upd.annotations[keys.ANN_IN_FLIGHT] is None
    # the incident closes (by its playbook); the next look forgets its fences and holds none
    closed = dataclasses.replace(
        inc, play=play, closed_at=stamp(T0), closed_by="playbook", why=domains_play.summary(play)
    )
    vocab = cfg.vocabulary()
    after = [
        v if v.name not in ("n0", "n1") else view(make_node(v.name, labels={CLIQUE: "a"}), vocab)
        for v in views
    ]
    rev = domains.review(after, cfg.domains, T0 + timedelta(seconds=5), mem, (closed,))
    assert rev.open == () and rev.held == {} and rev.opened == ()
    assert domains.holds(rev) == {}
    # n2, still fenced, starts its own ladder at its rung
    n2 = next(v for v in after if v.name == "n2")
    action = ladder.decide(n2, T0 + timedelta(seconds=5), cfg)
    assert action.kind == Kind.WRITE and action.step == "reboot" and action.new_work
    # and the returned node's history has the incident's pass (a later episode counts on)
    n0 = view(make_node("n0", annotations={keys.ANN_HISTORY: upd_history(upd)}), vocab)
    assert [a.step for a in decode(n0.annotations[keys.ANN_HISTORY])] == ["domain"]


def upd_history(upd) -> str:
    import json

    return json.dumps([dataclasses.asdict(a) for a in upd.append])


def test_the_record_round_trips_and_an_unreadable_play_reads_as_none():
    play = domains_play.Play(
        "fm.yml",
        status="done",
        nodes=("a", "b"),
        runs=2,
        outcome="2 of 2 node(s) ok",
        results={"a": "ok", "b": "ok"},
        passed=("a",),
        failed=("b",),
        ended_at=stamp(T0),
    )
    assert domains_play.Play.from_json(play.to_json()) == play
    assert domains_play.Play.from_json({"playbook": "x", "status": "exploded"}) is None
    assert domains_play.Play.from_json("nonsense") is None
    assert domains_play.request_id("nvidia.com/gpu.clique=a@2026-11-26T20:00:00Z") == (
        "domain-nvidia.com_gpu.clique_a_2026-11-26T20_00_00Z"
    )


# -- properties: the playbook's steps driven as the keeper drives them, the controller
# killed at any point (the record read back each time), the roles acting once per request


class Node:
    """A node's side of the domain playbook: its role acts once per request id (the
    service_restart role's marker: started, done), and its fault is cured when it acts
    unless it is ``stuck``."""

    def __init__(self, stuck: bool) -> None:
        self.stuck, self.marker, self.acts, self.cured = stuck, None, 0, False
        self.requests: set[str] = set()

    def play(self, request: str, interrupted_before_done: bool) -> None:
        self.requests.add(request)
        if self.marker == (request, "done"):
            return
        self.marker = (request, "started")
        self.acts += 1
        self.cured = not self.stuck
        if not interrupted_before_done:
            self.marker = (request, "done")


EVENTS = ["kill_before", "kill_mid", "kill_after", "lost", "end"]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.booleans(), min_size=2, max_size=6),
    st.lists(st.sampled_from(EVENTS), max_size=8),
)
def test_the_playbook_acts_once_per_incident_and_every_node_is_verified_after_it(stuck, events):
    names = [f"n{i}" for i in range(len(stuck))]
    cfg = cfg_with(threshold=2)
    vocab = cfg.vocabulary()
    views = [
        view(make_node(n, labels={CLIQUE: "a"}, taints=[vocab.repair("reboot").as_taint()]), vocab)
        for n in names
    ]
    mem = domains.Memory(True, {n: stamp(T0) for n in names})
    [inc] = domains.review(views, cfg.domains, T0, mem, ()).opened
    nodes = {n: Node(s) for n, s in zip(names, stuck, strict=True)}
    record = domains.encode([inc])
    todo = list(events)
    now = T0
    verified_after_last_run = None
    for _ in range(40):
        now += timedelta(seconds=30)
        [inc] = domains.decode(record)  # every step starts from the record (a restart)
        step = domains_play.next_step(inc.play, names)
        if step.what == "finish":
            break
        if step.what == "verify":
            results = {n: "ok" if nodes[n].cured else "failed" for n in step.nodes}
            verified_after_last_run = set(step.nodes)
            done = domains_play.verified(inc.play, results, now)
            record = domains.encode([dataclasses.replace(inc, play=done)])
            continue
        assert step.what == "run" and set(step.nodes) == set(names)
        play = domains_play.began(inc.play, step.nodes, f"run-{now:%H%M%S}", now)
        record = domains.encode([dataclasses.replace(inc, play=play)])  # before it starts
        event = todo.pop(0) if todo else "end"
        request = domains_play.request_id(inc.id)
        if event == "kill_before":
            continue  # killed before the run reached the nodes
        for n in step.nodes:
            nodes[n].play(request, interrupted_before_done=event == "kill_mid")
        if event in ("kill_mid", "kill_after"):
            continue  # killed before the outcome was recorded
        status = LOST if event == "lost" else "ok"
        after = domains_play.ran(play, dict.fromkeys(step.nodes, status), "", now, 600)
        record = domains.encode([dataclasses.replace(inc, play=after)])
        verified_after_last_run = None
    [inc] = domains.decode(record)
    assert inc.play.status == domains_play.DONE, inc.play
    assert verified_after_last_run == set(names), "every node verified after the last run"
    for n, node in nodes.items():
        assert len(node.requests) == 1, "one request id per incident, whatever the restarts"
        # acts again only when a run was killed between the act and its record of it
        assert node.acts <= 1 + events.count("kill_mid"), (n, node.acts, events)
        if "kill_mid" not in events:
            assert node.acts == 1, (n, node.acts, events)
    assert set(inc.play.passed) == {n for n in names if not nodes[n].stuck}
    assert set(inc.play.failed) == {n for n in names if nodes[n].stuck}
