"""tests/scheduling.py: scopes estimated from the committed timings, longest first, heavy
groups on different workers, new tests with no record scheduled by their directory's
figures; and the xdist scheduler itself driven through a simulated run (fake workers that
run what they are sent, as xdist's worker loop does, one test at a time)."""

from __future__ import annotations

import heapq
import json
from types import SimpleNamespace

import pytest

from tests import conftest, scheduling
from tests.scheduling import Timings

INTEG = "tests/integration"


def timings() -> Timings:
    return Timings(
        modules={
            f"{INTEG}/test_long.py": (600.0, 3),
            f"{INTEG}/test_mid.py": (200.0, 2),
            f"{INTEG}/test_short.py": (40.0, 4),
            f"{INTEG}/test_kubelet_node.py": (300.0, 2),
            f"{INTEG}/test_loki_smoke.py": (250.0, 5),
            "tests/unit/policy/test_a.py": (2.0, 100),
            "tests/unit/policy/test_b.py": (1.0, 50),
        },
        tests={f"{INTEG}/test_long.py::t1": 500.0, f"{INTEG}/test_mid.py::t1": 150.0},
    )


def test_named_tests_count_as_recorded_and_the_rest_share_their_module_remainder():
    t = timings()
    secs = scheduling.scope_seconds(
        [f"{INTEG}/test_long.py::t1", f"{INTEG}/test_long.py::t2", f"{INTEG}/test_long.py::t3"],
        scheduling.module_of,
        t,
    )
    assert secs == {f"{INTEG}/test_long.py": pytest.approx(600.0)}
    # a new test in the module: the unnamed tests' mean, (600 - 500) / 2
    secs = scheduling.scope_seconds(
        [f"{INTEG}/test_long.py::t1", f"{INTEG}/test_long.py::new"], scheduling.module_of, t
    )
    assert secs[f"{INTEG}/test_long.py"] == pytest.approx(550.0)


def test_a_new_integration_file_is_estimated_from_its_directory_not_as_nothing():
    t = timings()
    secs = scheduling.scope_seconds(
        [f"{INTEG}/test_new.py::a", "tests/unit/policy/test_new.py::a"], scheduling.module_of, t
    )
    integ = [600.0, 200.0, 40.0, 300.0, 250.0]
    assert secs[f"{INTEG}/test_new.py"] == pytest.approx(sorted(integ)[2])  # median: 250
    assert secs["tests/unit/policy/test_new.py"] == pytest.approx(1.5)  # (2 + 1) / 2 modules
    many = [f"{INTEG}/test_new.py::t{i}" for i in range(200)]
    per_test = sum(integ) / 16
    assert scheduling.scope_seconds(many, scheduling.module_of, t)[
        f"{INTEG}/test_new.py"
    ] == pytest.approx(200 * per_test)


def test_without_timings_the_order_is_the_collection_order():
    ids = [f"{INTEG}/test_b.py::x", f"{INTEG}/test_a.py::y", "tests/unit/test_c.py::z"]
    assert scheduling.longest_first(ids, scheduling.module_of, Timings()) == [0, 1, 2]


def test_scopes_run_longest_first_each_together_in_collection_order():
    ids = [
        "tests/unit/policy/test_a.py::u1",
        f"{INTEG}/test_short.py::s1",
        f"{INTEG}/test_loki_smoke.py::l1",
        f"{INTEG}/test_long.py::t2",
        f"{INTEG}/test_kubelet_node.py::k1",
        f"{INTEG}/test_long.py::t1",
        "tests/unit/policy/test_a.py::u2",
        f"{INTEG}/test_new.py::n1",
    ]
    order = [ids[i] for i in scheduling.longest_first(ids, conftest.xdist_scope, timings())]
    assert order == [
        f"{INTEG}/test_long.py::t2",  # 550: t1's 500 and t2 at the module's rest, 50
        f"{INTEG}/test_long.py::t1",
        f"{INTEG}/test_new.py::n1",  # no record: the median integration module, 250
        f"{INTEG}/test_kubelet_node.py::k1",  # group kubelet: 150, half its module
        f"{INTEG}/test_loki_smoke.py::l1",  # group loki: 50
        f"{INTEG}/test_short.py::s1",  # 10
        "tests/unit/policy/test_a.py::u1",
        "tests/unit/policy/test_a.py::u2",
    ]


@pytest.mark.parametrize(
    ("queue", "first_round", "chosen"),
    [
        (["x.py", "group a", "y.py", "group b"], True, 1),  # a worker's first unit: a group
        (["x.py", "y.py"], True, 0),  # no group left: the longest
        (["x.py", "group a", "group b"], False, 0),  # later: the longest, whatever it is
    ],
)
def test_each_worker_starts_on_a_heavy_group_then_takes_the_longest(queue, first_round, chosen):
    assert scheduling.pick_scope(queue, first_round) == chosen


def test_the_plan_of_longest_first():
    # 10 + 4 on one worker, 6 + 5 on the other
    assert sorted(scheduling.simulate({"a": 10, "b": 6, "c": 5, "d": 4}, 2)) == [11, 14]


# -- the xdist scheduler, in a simulated run ---------------------------------------------


class FakeWorker:
    """What xdist's worker loop does with the indexes it is sent: it runs a test only when
    it knows the next one (or is told to shut down), one at a time."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.gateway = SimpleNamespace(id=name)
        self.queue: list[int] = []
        self.shutting_down = False
        self.ran: list[int] = []

    def send_runtest_some(self, indices) -> None:
        self.queue.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True

    def next_test(self) -> int | None:
        if len(self.queue) >= 2 or (self.queue and self.shutting_down):
            return self.queue.pop(0)
        return None

    def __repr__(self) -> str:
        return self.name


def run(collection: list[str], seconds: dict[str, float], n: int):
    """Drive the scheduler to the end; returns the workers and the makespan."""
    config = SimpleNamespace(
        option=SimpleNamespace(loadscopereorder=True), getvalue=lambda k: [f"{n}*popen"]
    )
    sched = scheduling.make_scheduler(config, None, conftest.xdist_scope)
    workers = [FakeWorker(f"gw{i}") for i in range(n)]
    for w in workers:
        sched.add_node(w)
    for w in workers:
        sched.add_node_collection(w, collection)
    sched.schedule()
    clock, running = 0.0, []  # (ends at, worker name, worker, index)
    while True:
        for w in workers:
            if all(r[2] is not w for r in running):
                i = w.next_test()
                if i is not None:
                    w.ran.append(i)
                    heapq.heappush(running, (clock + seconds[collection[i]], w.name, w, i))
        if not running:
            break
        clock, _, w, i = heapq.heappop(running)
        sched.mark_test_complete(w, i)
    assert sched.tests_finished
    return workers, clock


def test_the_scheduler_runs_everything_once_longest_first_groups_apart():
    t = timings()
    ids = [
        *(f"tests/unit/policy/test_u{j}.py::u{i}" for j in range(40) for i in range(5)),
        *(f"{INTEG}/test_short.py::s{i}" for i in range(4)),
        *(f"{INTEG}/test_kubelet_node.py::k{i}" for i in range(2)),
        f"{INTEG}/test_agent_daemonset.py::d0",
        *(f"{INTEG}/test_loki_smoke.py::l{i}" for i in range(5)),
        *(f"{INTEG}/test_mesh_smoke.py::m{i}" for i in range(3)),
        *(f"{INTEG}/test_long.py::t{i}" for i in (1, 2, 3)),
        *(f"{INTEG}/test_mid.py::t{i}" for i in (1, 2)),
    ]
    order = scheduling.longest_first(ids, conftest.xdist_scope, t)
    collection = [ids[i] for i in order]  # what the workers collect after the reordering
    est = dict.fromkeys(collection, 1.0)
    est.update({i: s for i, s in t.tests.items() if i in est})
    est.update({f"{INTEG}/test_long.py::t2": 50, f"{INTEG}/test_long.py::t3": 50})
    est.update({f"{INTEG}/test_kubelet_node.py::k{i}": 150 for i in range(2)})
    est.update({f"{INTEG}/test_loki_smoke.py::l{i}": 50 for i in range(5)})
    workers, makespan = run(collection, est, 2)
    ran = sorted(i for w in workers for i in w.ran)
    assert ran == list(range(len(collection)))  # every test once
    scopes = [{conftest.xdist_scope(collection[i]) for i in w.ran} for w in workers]
    held = [{s for s in ss if s.startswith("group ")} for ss in scopes]
    # three groups on two workers: one each first, never all three on one
    assert sorted(len(h) for h in held) == [1, 2]
    assert makespan <= 0.55 * sum(est.values())  # balanced
    # the first tests: a group on each worker (the longest two), at once
    firsts = [conftest.xdist_scope(collection[w.ran[0]]) for w in workers]
    assert firsts == ["group kubelet", "group receptor"]


def test_a_worker_is_given_more_only_when_down_to_its_last_test():
    ids = [f"{INTEG}/test_a.py::t{i}" for i in range(4)]
    ids += [f"{INTEG}/test_{x}.py::t0" for x in "bcde"]
    config = SimpleNamespace(option=SimpleNamespace(), getvalue=lambda k: ["2*popen"])
    sched = scheduling.make_scheduler(config, None, conftest.xdist_scope)
    a, b = FakeWorker("gw0"), FakeWorker("gw1")
    for w in (a, b):
        sched.add_node(w)
    for w in (a, b):
        sched.add_node_collection(w, ids)
    sched.schedule()
    assert a.queue == [0, 1, 2, 3] and b.queue == [4, 5]  # b: one test a unit, so two units
    sched.mark_test_complete(a, 0)
    sched.mark_test_complete(a, 1)  # two left (one running, one held): not yet
    assert a.queue == [0, 1, 2, 3]  # (xdist's own threshold would have sent test_d here)
    sched.mark_test_complete(a, 2)  # down to the held last test: the next unit
    assert a.queue == [0, 1, 2, 3, 6]
    assert not a.shutting_down


def test_an_unreadable_timings_file_gives_none(tmp_path):
    bad = tmp_path / "timings.json"
    bad.write_text(json.dumps({"modules": {"x.py": {"seconds": "soon"}}}))
    assert Timings.load(bad) == Timings()
    assert Timings.load(tmp_path / "absent.json") == Timings()


def test_the_committed_timings_load_and_name_real_modules():
    t = Timings.load()
    assert t.modules, "tests/timings.json holds no modules (make timings)"
    assert all(m.startswith("tests/") and m.endswith(".py") for m in t.modules)
    assert all(n > 0 and s >= 0 for s, n in t.modules.values())
