"""Shared fixtures. The heavy ones (fleet, API server, SMTP sink, Loki, Receptor mesh)
live in
tests/harness and are registered here as plugins so every test can use them.

Under ``CI=true`` the run refuses every ``FLEETMEDIC_*_SKIP`` switch (they turn a missing
build into skipped tests) and every switch that puts something else in place of a real part
(``tests.harness.procs.REPLACING_SWITCHES``: a developer's own build, the patched Receptor):
CI must run every test against what setup builds (scripts/test.sh checks the same).

No test may be marked expected-to-fail: an xfail is a run that passes whether the code
works or not. A case that fails by chance upstream is made deterministic, or lives in a
reproducer script outside the suite (tests/receptor/wedge_repro.py)."""

import os
import re
from pathlib import Path

import pytest
from hypothesis import settings

from tests import scheduling
from tests.harness.procs import ReplacedUnderCI, refuse_under_ci

# Hypothesis's default 200 ms deadline per example is a timed test: on a shared 2-CPU
# machine an example that takes 150 ms takes 300 ms at load 12 (test_safety's breaker
# property failed so). Speed is measured in bench/, so no property test has a deadline.
settings.register_profile("fleetmedic", deadline=None)
settings.load_profile("fleetmedic")

pytest_plugins = [
    p
    for p in (
        "tests.harness.smtp_fixtures",
        "tests.harness.fleet_fixtures",
        "tests.harness.kube_fixtures",
        "tests.harness.kubelet_fixtures",
        "tests.harness.loki_fixtures",
        "tests.harness.mesh_fixtures",
        "tests.harness.slurm_fixtures",
        "tests.harness.slurmfleet_fixtures",
        "tests.harness.timeout_scaling",
    )
    if __import__("importlib.util").util.find_spec(p) is not None
]

SKIP_SWITCH = re.compile(r"FLEETMEDIC_\w+_SKIP")


def pytest_configure(config: pytest.Config) -> None:
    record = config.getoption("--record-timings")
    if record and not hasattr(config, "workerinput"):  # the process that sees every report
        config.pluginmanager.register(
            scheduling.Recorder(Path(record), config.getoption("--whole-suite")), "timings-recorder"
        )
    if os.environ.get("CI") != "true":
        return
    switches = sorted(k for k, v in os.environ.items() if SKIP_SWITCH.fullmatch(k) and v)
    if switches:
        raise pytest.UsageError(
            f"refused under CI=true: {', '.join(switches)} (CI runs every test; unset them)"
        )
    try:
        refuse_under_ci()
    except ReplacedUnderCI as e:
        raise pytest.UsageError(str(e)) from None


# Under pytest-xdist (scripts/test.sh runs ``-n N --dist loadscope``) a worker takes a whole
# scope at a time (xdist_scope): an integration file, so its module-scoped fleets and
# controllers come up once, or a group of files that share a heavy session fixture (the
# kubelet node, Loki, the Receptor mesh), so one worker brings it up and the others never;
# a unit test file. Each worker brings up its own API server and session fleet (free
# ports, free fleet subnets, names with its pid). The scopes run longest first, by the
# durations the last full run recorded (tests/timings.json, `make timings`), and the
# groups go to different workers (tests/scheduling.py). (A scheduler of our own rather
# than xdist_group marks: pytest 9 ignores the node id suffix that xdist 3.8's loadgroup
# sets.)
WORKER_GROUPS = {
    "tests/integration/test_agent_daemonset.py": "kubelet",
    "tests/integration/test_kubelet_node.py": "kubelet",
    "tests/integration/test_loki_smoke.py": "loki",
    "tests/integration/test_loki_source.py": "loki",
    "tests/integration/test_loki_tail.py": "loki",
    "tests/integration/test_slurm_loki.py": "loki",
    "tests/integration/test_storm.py": "loki",
    "tests/integration/test_mesh_smoke.py": "receptor",
    "tests/integration/test_receptor_executor.py": "receptor",
}
# The heavy session fixtures (tests/harness/*_fixtures.py) and their group: a file that uses
# one must be in WORKER_GROUPS with it (checked at collection).
GROUP_BY_FIXTURE = {
    "kubelet_cluster": "kubelet",
    "kubelet_fleet": "kubelet",
    "loki": "loki",
    "loki_factory": "loki",
    "mesh_binaries": "receptor",
}


_SLURM_RELEASE = re.compile(r"\[(?:.*-)?(slurm-\d+\.\d+)\b")


def xdist_scope(nodeid: str) -> str:
    """The unit of work a worker takes whole: a group of files, or the test's file; a Slurm
    file's tests of one release apart from the other's (each release has its own clusters,
    so the halves share nothing, and the two can run at once on two workers)."""
    path = nodeid.split("::", 1)[0]
    if path in WORKER_GROUPS:
        return f"group {WORKER_GROUPS[path]}"
    release = _SLURM_RELEASE.search(nodeid)
    return f"{path} [{release[1]}]" if release else path


@pytest.hookimpl(optionalhook=True)  # an xdist hook: no error when xdist is not installed
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    if config.getvalue("dist") != "loadscope":
        return None
    return scheduling.make_scheduler(config, log, xdist_scope)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-timings",
        metavar="PATH",
        help="write each test's seconds to PATH as JSON (scripts/timings.py refresh reads it)",
    )
    parser.addoption(
        "--whole-suite",
        action="store_true",
        help="this run is (a lane of) the whole suite, as scripts/test.sh runs it: its record"
        " says so, and `make timings` then drops the modules the suite no longer has",
    )


def misgrouped(items: list[pytest.Item]) -> list[str]:
    """Files that use a heavy session fixture but are not in its WORKER_GROUPS group."""
    out = set()
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        for fixture, group in GROUP_BY_FIXTURE.items():
            if fixture in getattr(item, "fixturenames", ()) and WORKER_GROUPS.get(path) != group:
                out.add(f"{path} uses {fixture}: put it in group {group!r}")
    return sorted(out)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    xfails = [item.nodeid for item in items if item.get_closest_marker("xfail")]
    if xfails:
        raise pytest.UsageError(
            f"marked xfail: {', '.join(xfails)}: make the test deterministic, or move the "
            "case into a reproducer script outside the suite (see tests/conftest.py)"
        )
    wrong = misgrouped(items)
    if wrong:
        raise pytest.UsageError(f"tests/conftest.py WORKER_GROUPS: {'; '.join(wrong)}")
    order = scheduling.longest_first(
        [item.nodeid for item in items], xdist_scope, scheduling.Timings.load()
    )
    items[:] = [items[i] for i in order]
