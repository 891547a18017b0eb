"""How the suite spreads over pytest-xdist workers, from the durations a full run recorded.

The unit of work a worker takes whole is a *scope* (tests/conftest.py ``xdist_scope``): a
group of files that share a heavy session fixture, or one file. This module

- estimates each scope's seconds from the committed timings (tests/timings.json, written
  by ``make timings`` from the last full run: scripts/timings.py). A test with no recorded
  time (new, or renamed) counts as the mean of the unrecorded tests of its module; a
  module with no record at all as the larger of its directory's median module and its
  tests at its directory's mean per test, so a new integration file starts early rather
  than last;
- orders the collected items longest scope first (stable inside a scope), which is the
  order xdist's loadscope queue takes them in, and also the order of a serial run;
- gives each worker a heavy group first (the longest groups, one a worker, as far as they
  go), so the groups' fixtures come up at once on different workers rather than one after
  another on one; then a free worker takes the longest scope left;
- records a run's per-test durations (setup, call and teardown) for scripts/timings.py.

The estimates only change the order: every collected test runs (scripts/check_pytest_run.py
counts them).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMINGS = ROOT / "tests" / "timings.json"
HEAVY_PREFIX = "group "  # the scope name of a WORKER_GROUPS group (tests/conftest.py)


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def directory_of(module: str) -> str:
    """The part of the tree a module's fallback estimate comes from: tests/integration,
    tests/unit, ... (the second path component)."""
    parts = module.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else ""


@dataclass
class Timings:
    """The committed timings: every module's seconds and test count, and the seconds of
    each test slow enough to be worth naming (the rest share their module's remainder)."""

    modules: dict[str, tuple[float, int]] = field(default_factory=dict)
    tests: dict[str, float] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path = TIMINGS) -> Timings:
        """The file's timings; an absent or unreadable file gives none (every test then
        gets the same estimate, and the order is the collection order)."""
        try:
            data = json.loads(path.read_text())
            modules = {
                m: (float(v["seconds"]), int(v["tests"])) for m, v in data["modules"].items()
            }
            tests = {k: float(v) for k, v in data.get("tests", {}).items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return cls()
        return cls(modules, tests)

    def estimator(self) -> Callable[[str, int], float]:
        """A function (module, number of its collected tests) -> estimated seconds of those
        tests other than the named ones, for :func:`scope_seconds`."""
        named_in: dict[str, tuple[float, int]] = defaultdict(lambda: (0.0, 0))
        for nodeid, s in self.tests.items():
            total, n = named_in[module_of(nodeid)]
            named_in[module_of(nodeid)] = (total + s, n + 1)
        rest_mean: dict[str, float] = {}
        by_dir: dict[str, list[tuple[float, int]]] = defaultdict(list)
        for module, (seconds, count) in self.modules.items():
            named_s, named_n = named_in[module]
            if count > named_n:
                rest_mean[module] = max(0.0, seconds - named_s) / (count - named_n)
            by_dir[directory_of(module)].append((seconds, count))
        all_modules = [v for vs in by_dir.values() for v in vs]

        def dir_stats(d: str) -> tuple[float, float]:
            vs = by_dir.get(d) or all_modules
            if not vs:
                return 0.0, 1.0  # no timings at all: one unit a test
            per_test = sum(s for s, _ in vs) / max(1, sum(n for _, n in vs))
            return statistics.median(s for s, _ in vs), per_test

        def estimate(module: str, unnamed: int) -> float:
            if module in rest_mean:
                return rest_mean[module] * unnamed
            if module in self.modules:  # every recorded test was named: new ones as the mean
                seconds, count = self.modules[module]
                return seconds / max(1, count) * unnamed
            median_module, per_test = dir_stats(directory_of(module))
            return max(median_module, per_test * unnamed) if unnamed else 0.0

        return estimate


def scope_seconds(
    nodeids: Iterable[str], scope_of: Callable[[str], str], timings: Timings
) -> dict[str, float]:
    """The estimated seconds of each scope of ``nodeids``."""
    estimate = timings.estimator()
    named: dict[str, float] = defaultdict(float)
    unnamed: dict[tuple[str, str], int] = defaultdict(int)
    for nodeid in nodeids:
        scope = scope_of(nodeid)
        if nodeid in timings.tests:
            named[scope] += timings.tests[nodeid]
        else:
            unnamed[(scope, module_of(nodeid))] += 1
            named[scope] += 0.0
    for (scope, module), n in unnamed.items():
        named[scope] += estimate(module, n)
    return dict(named)


def longest_first(
    nodeids: Sequence[str], scope_of: Callable[[str], str], timings: Timings
) -> list[int]:
    """Indexes of ``nodeids`` reordered: scopes by estimated seconds, longest first (ties in
    collection order), each scope's tests together and in their collection order."""
    seconds = scope_seconds(nodeids, scope_of, timings)
    first_seen: dict[str, int] = {}
    for i, nodeid in enumerate(nodeids):
        first_seen.setdefault(scope_of(nodeid), i)
    return sorted(
        range(len(nodeids)),
        key=lambda i: (
            -seconds[scope_of(nodeids[i])],
            first_seen[scope_of(nodeids[i])],
            i,
        ),
    )


def pick_scope(queue: Sequence[str], first_round: bool) -> int:
    """Which queued scope (queue order: longest first) a worker takes: in the first round,
    as each worker takes its first unit, the longest heavy group left, so the groups'
    fixtures come up at once on different workers rather than late on one; then the
    longest scope left."""
    if first_round:
        for i, scope in enumerate(queue):
            if scope.startswith(HEAVY_PREFIX):
                return i
    return 0


def simulate(seconds: dict[str, float], workers: int) -> list[float]:
    """Each worker's busy seconds when free workers take the queued scopes longest first
    (what :func:`longest_first` and :func:`pick_scope` do, without the heavy rule): the
    makespan is the largest. For scripts/timings.py's plan."""
    loads = [0.0] * max(1, workers)
    for s in sorted(seconds.values(), reverse=True):
        i = loads.index(min(loads))
        loads[i] += s
    return loads


def make_scheduler(config, log, scope_of: Callable[[str], str]):
    """The ``--dist loadscope`` scheduler for xdist: scopes from ``scope_of``, taken in the
    workers' collection order (which :func:`longest_first` set), a heavy group first on
    each worker (:func:`pick_scope`), and more work given only to a worker down to its last
    test (xdist's default gives it more at three left, so a worker could take the next long
    scope while another is about to be free)."""
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        first_round = False

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

        def schedule(self) -> None:
            self.first_round = self.collection is None
            try:
                super().schedule()
            finally:
                self.first_round = False

        def _assign_work_unit(self, node) -> None:
            queue = list(self.workqueue)
            first = self.first_round and not self.assigned_work.get(node)
            scope = queue[pick_scope(queue, first)]
            self.workqueue.move_to_end(scope, last=False)  # the base class pops the first
            super()._assign_work_unit(node)

        def _reschedule(self, node) -> None:
            busy = self.workqueue and self._pending_of(self.assigned_work[node]) > 1
            if busy and not node.shutting_down:
                return
            super()._reschedule(node)

    config.option.loadscopereorder = False
    return Scheduling(config, log)


class Recorder:
    """Collects each test's seconds (setup + call + teardown) in the process that sees every
    report (the xdist controller, or the only process of a serial run) and writes them as
    JSON at the end: ``{"run": {...}, "tests": {nodeid: seconds}}``."""

    def __init__(self, path: Path, whole: bool) -> None:
        self.path = path
        self.whole = whole
        self.seconds: dict[str, float] = defaultdict(float)
        self.t0 = time.time()
        self.load0 = _loadavg()

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[report.nodeid] += report.duration

    def pytest_sessionfinish(self, session) -> None:
        workers = getattr(session.config.option, "numprocesses", None) or 1
        run = {
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.t0)),
            "wall_seconds": round(time.time() - self.t0, 1),
            "workers": workers,
            "cpus": len(os.sched_getaffinity(0)),
            "load_start": self.load0,
            "load_end": _loadavg(),
            "whole": self.whole,
        }
        tests = {k: round(v, 3) for k, v in sorted(self.seconds.items())}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps({"run": run, "tests": tests}, indent=0) + "\n")


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return ""
