"""scripts/test.sh's lanes, run for real on a tree of stand-ins: the script itself and the
checkers it calls (scripts/pytest_workers.py, scripts/check_pytest_run.py,
tests/harness/procs.py) are the repository's; setup, the linters, pytest, Molecule and the
benches are small programs that log their call and do what a test asks (fail, leave a test
out). The whole suite is not run here: this is the plumbing (every stage runs, the exit
status says whether all passed, the count check sees both pytest lanes, CI=true refuses
what it must, the lanes overlap).

Overlap is shown without timing: the stand-in setup waits for the unit tests to have
started (the checks lane runs beside setup), and the stand-in integration pytest waits for
a bench and a Molecule scenario to have started (they run beside it); each gives up after
120 s and fails its stage, so lanes run one after another fail the run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import procs

ROOT = Path(__file__).resolve().parents[3]
UNIT, INTEG = 3, 4  # tests in the stand-in unit and integration reports
TOOLS = ("pytest", "lint-imports", "ruff", "mypy", "ansible-lint", "ansible-galaxy", "molecule")

# One stand-in for every tool: logs "NAME ARGS" to $FAKE_LOG; fails when NAME is in
# $FAKE_FAIL; as pytest writes the JUnit report and the timings record it is asked for.
TOOL = r"""#!{python}
import json, os, sys, time
from pathlib import Path

name, args = Path(sys.argv[0]).name, sys.argv[1:]
fake = Path(os.environ["FAKE_DIR"])
with open(fake / "log", "a") as f:
    f.write(" ".join([name, *args]) + "\n")


def wait_for(*marks):
    deadline = time.monotonic() + 120
    while not all((fake / m).exists() for m in marks):
        if time.monotonic() > deadline:
            sys.exit(f"{{name}}: no {{marks}} after 120 s: the lanes did not overlap")
        time.sleep(0.1)


if name in os.environ.get("FAKE_FAIL", "").split(","):
    sys.exit(1)
if name == "molecule":
    (fake / "molecule-started").touch()
if name == "pytest":
    if "--collect-only" in args:
        print(os.environ["FAKE_TOTAL"] + " tests collected in 0.01s")
        sys.exit(0)
    opt = dict(a.split("=", 1) for a in args if a.startswith("--") and "=" in a)
    lanes = [p.split("/")[1] for p in args if p in ("tests/unit", "tests/integration")]
    lane = lanes[0] if lanes else "subset"
    n = {{"unit": {unit}, "integration": {integ}}}.get(lane, 1)
    if lane == "unit":
        (fake / "unit-started").touch()
    if lane == "integration" and os.environ.get("FAKE_OVERLAP"):
        wait_for("molecule-started", "bench-started")
    cases = "".join(
        f'<testcase classname="tests.{{lane}}.test_fake" name="test_{{i}}" time="1.5"/>'
        for i in range(n)
    )
    Path(opt["--junitxml"]).write_text(f"<testsuites><testsuite>{{cases}}</testsuite></testsuites>")
    record = {{
        "run": {{"whole": "--whole-suite" in args}},
        "tests": {{f"tests/{{lane}}/test_fake.py::test_{{i}}": 1.5 for i in range(n)}},
    }}
    Path(opt["--record-timings"]).write_text(json.dumps(record))
"""
SETUP = """#!/usr/bin/env bash
echo "setup start" >> "$FAKE_DIR/log"
[[ -z ${FLEETMEDIC_SETUP_VENV_READY:-} ]] || : > "$FLEETMEDIC_SETUP_VENV_READY"
if [[ -n ${FAKE_OVERLAP:-} ]]; then  # the checks lane runs beside setup
  for _ in $(seq 1200); do [[ -e $FAKE_DIR/unit-started ]] && break; sleep 0.1; done
  [[ -e $FAKE_DIR/unit-started ]] || { echo "setup: no unit tests beside it"; exit 3; }
fi
mkdir -p build && printf '30-kube.sh\\t1\\tok\\t0.1\\n' > build/setup-times.tsv
echo "setup end" >> "$FAKE_DIR/log"
exit "${FAKE_SETUP_RC:-0}"
"""
BENCH = """import os, pathlib, sys
fake = pathlib.Path(os.environ["FAKE_DIR"])
(fake / "bench-started").touch()
with open(fake / "log", "a") as f:
    f.write(" ".join(["bench", *sys.argv]) + "\\n")
"""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    t = tmp_path / "tree"
    for rel in (
        "scripts/test.sh",
        "scripts/pytest_workers.py",
        "scripts/check_pytest_run.py",
        "tests/__init__.py",
        "tests/harness/__init__.py",
        "tests/harness/procs.py",
        "tests/allowed-skips.txt",
    ):
        (t / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, t / rel)
    (t / "scripts/setup.sh").write_text(SETUP)
    (t / "scripts/sanity.sh").write_text('echo sanity >> "$FAKE_DIR/log"\n')
    (t / "bench").mkdir()
    (t / "bench/one.py").write_text(BENCH)
    (t / "bench/_shared.py").write_text("raise SystemExit('shared bench code is not a bench')\n")
    for scenario in ("alpha", "default"):
        (t / "tests/molecule" / scenario).mkdir(parents=True)
        (t / "tests/molecule" / scenario / "molecule.yml").write_text("---\n")
    (t / "roles/r/tasks").mkdir(parents=True)
    (t / "roles/r/tasks/main.yml").write_text("---\n")
    venv = t / ".venv" / "bin"
    venv.mkdir(parents=True)
    tool = venv / "_tool"
    tool.write_text(TOOL.format(python=sys.executable, unit=UNIT, integ=INTEG))
    tool.chmod(0o755)
    for name in TOOLS:
        (venv / name).symlink_to("_tool")
    (venv / "python").symlink_to(sys.executable)
    (tmp_path / "fake").mkdir()
    return t


def run(tree: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CI", "PYTEST_ADDOPTS") and not k.startswith("FLEETMEDIC_")
    }
    full = {
        **base,
        "FAKE_DIR": str(tree.parent / "fake"),
        "FAKE_TOTAL": str(UNIT + INTEG),
        "FLEETMEDIC_PYTEST_WORKERS": "2",
        "FLEETMEDIC_NICE_LANES": "0",  # the stand-ins at this test's priority
        **env,
    }
    return subprocess.run(
        ["bash", str(tree / "scripts/test.sh"), *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=240,
    )


def calls(tree: Path) -> list[str]:
    log = tree.parent / "fake" / "log"
    return log.read_text().splitlines() if log.exists() else []


def called(tree: Path, tool: str) -> list[str]:
    return [c for c in calls(tree) if c.split()[0] == tool]


STAGES = (
    "import layering (import-linter): ok",
    "ruff lint (package, tests, bench, scripts, deploy): ok",
    "ruff format (whole tree): ok",
    "mypy (package): ok",
    "ansible-lint (production profile): ok",
    "collection build: ok",
    "pytest unit (tests/unit): ok",
    "ansible-test sanity (collection as built): ok",
    "pytest integration (tests/integration): ok",
    "bench smoke one: ok",
    "molecule alpha: ok",
    "pytest: every test of the suite ran, no skip off the allow-list: ok",
)


def test_every_stage_runs_in_overlapping_lanes_and_the_run_passes(tree):
    r = run(tree, FAKE_OVERLAP="1")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    for stage in STAGES:
        assert f"== {stage}" in out, stage
    assert r.stdout.rstrip().endswith("all stages passed")
    pytests = called(tree, "pytest")
    unit, integ = (next(c for c in pytests if c.endswith(p)) for p in ("unit", "integration"))
    for call in (unit, integ):
        assert "--whole-suite" in call and "-n 2 --dist loadscope" in call, call
    assert called(tree, "bench") and not any("_shared" in c for c in calls(tree))
    assert [c.split()[-1] for c in called(tree, "molecule")] == ["alpha"]  # not default
    assert "sanity" in calls(tree)
    # the end table: every stage with its lane, and each lane's span
    table = out[out.index("== wall time per part") :]
    for lane in ("checks", "integration", "benches", "molecule", "setup"):
        assert f"   {lane}" in table, lane
    # what `make timings` reads: a record per pytest lane, both of the whole suite
    reports = tree / "build" / "test-reports"
    for lane, n in (("unit", UNIT), ("integration", INTEG)):
        record = json.loads((reports / f"durations-{lane}.json").read_text())
        assert record["run"]["whole"] and len(record["tests"]) == n


def test_a_failing_stage_fails_the_run_and_every_other_stage_still_runs(tree):
    r = run(tree, FAKE_FAIL="ruff,molecule")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    failed = r.stdout.rstrip().splitlines()[-1]
    assert failed == (  # the lanes' failures, in the lanes' order (checks, then molecule)
        "FAILED stages: ruff lint (package, tests, bench, scripts, deploy)"
        " ruff format (whole tree) molecule alpha"
    )
    assert "== pytest integration (tests/integration): ok" in out
    assert "== pytest: every test of the suite ran, no skip off the allow-list: ok" in out
    assert "== mypy (package): ok" in out  # after the failed ruff stages, in the same lane


def test_a_test_that_ran_in_no_lane_fails_the_count_check(tree):
    r = run(tree, FAKE_TOTAL=str(UNIT + INTEG + 1))
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert f"{UNIT + INTEG} tests in the run, but the suite holds {UNIT + INTEG + 1}" in out
    assert r.stdout.rstrip().endswith(
        "FAILED stages: pytest: every test of the suite ran, no skip off the allow-list"
    )


def test_a_failed_setup_fails_the_run_and_runs_nothing_that_needs_it(tree):
    r = run(tree, FAKE_SETUP_RC="1")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert r.stdout.rstrip().splitlines()[-1] == "FAILED stages: setup"
    assert not [c for c in called(tree, "pytest") if c.endswith("integration")]
    assert not called(tree, "molecule") and not called(tree, "bench")
    assert "sanity" not in calls(tree)


def test_serial_lanes_run_one_after_another_and_pass(tree):
    r = run(tree, FLEETMEDIC_SERIAL_LANES="1")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    log = calls(tree)
    assert log.index("setup end") < min(log.index(c) for c in called(tree, "lint-imports"))
    integ = log.index(next(c for c in called(tree, "pytest") if c.endswith("integration")))
    assert integ < log.index(called(tree, "molecule")[0])
    for stage in STAGES:
        assert f"== {stage}" in out, stage


def test_arguments_run_one_pytest_of_them_without_the_count_check(tree):
    r = run(tree, "tests/unit/test_x.py")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    [call] = called(tree, "pytest")
    assert call.endswith("tests/unit/test_x.py") and "--whole-suite" not in call
    assert "every test of the suite ran" not in out


@pytest.mark.parametrize(
    "env, args, refused",
    [
        ({"FLEETMEDIC_KUBE_SKIP": "1"}, (), "FLEETMEDIC_KUBE_SKIP"),
        ({procs.REPLACING_SWITCHES[0]: "/x"}, (), procs.REPLACING_SWITCHES[0]),
        ({}, ("tests/unit",), "pytest arguments (tests/unit)"),
    ],
)
def test_ci_refuses_switches_and_arguments_before_anything_runs(tree, env, args, refused):
    r = run(tree, *args, CI="true", **env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "refused under CI=true" in r.stderr and refused in r.stderr
    assert calls(tree) == []
