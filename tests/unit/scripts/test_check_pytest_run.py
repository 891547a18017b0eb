"""scripts/check_pytest_run.py: a pytest run that skipped off the allow-list, or ran fewer
tests than the suite holds, fails make test."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "check_pytest_run.py"
_spec = importlib.util.spec_from_file_location("check_pytest_run", SCRIPT)
check_pytest_run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_pytest_run)


def report(tmp_path: Path, *cases: str) -> Path:
    path = tmp_path / "report.xml"
    path.write_text(
        '<?xml version="1.0"?><testsuites><testsuite name="pytest">'
        + "".join(cases)
        + "</testsuite></testsuites>"
    )
    return path


PASSED = '<testcase classname="tests.unit.test_a" name="test_ok" time="0.1"/>'


def skipped(message: str) -> str:
    return (
        '<testcase classname="tests.unit.test_a" name="test_skip" time="0">'
        f'<skipped type="pytest.skip" message="{message}">file.py:3: {message}</skipped>'
        "</testcase>"
    )


def test_allowed_skip_and_full_count_pass(tmp_path):
    path = report(tmp_path, PASSED, skipped("/dev/kmsg is not readable here"))
    assert check_pytest_run.check(path, 2, ["/dev/kmsg is not readable here"]) == []


def test_a_skip_off_the_list_fails_naming_the_test(tmp_path):
    path = report(tmp_path, PASSED, skipped("iperf3 is not installed"))
    [problem] = check_pytest_run.check(path, 2, ["/dev/kmsg is not readable here"])
    assert "tests.unit.test_a::test_skip" in problem and "iperf3 is not installed" in problem


def test_fewer_tests_than_the_suite_fails(tmp_path):
    [problem] = check_pytest_run.check(report(tmp_path, PASSED), 5, [])
    assert "1 tests in the run, but the suite holds 5" in problem


def test_the_shipped_allow_list_is_short_and_every_entry_says_why():
    reasons = check_pytest_run.allowed_reasons()
    assert 0 < len(reasons) <= 5


def test_under_ci_a_desk_only_skip_fails(tmp_path):
    """The host-dependent skips are allowed on a desk; CI's machine must run those tests."""
    allowed = tmp_path / "allowed.txt"
    allowed.write_text("no GPU here  # desk only: a GPU box\nold kernel  # any machine\n")
    assert check_pytest_run.allowed_reasons(allowed) == ["no GPU here", "old kernel"]
    assert check_pytest_run.allowed_reasons(allowed, ci=True) == ["old kernel"]
    assert check_pytest_run.allowed_reasons(ci=True) == [], "every shipped entry is desk only"
    path = report(tmp_path, PASSED, skipped("a real libnvidia-ml is installed on this machine"))
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    desk = subprocess.run([sys.executable, str(SCRIPT), str(path)], env=env)
    ci = subprocess.run(
        [sys.executable, str(SCRIPT), str(path)],
        env={**env, "CI": "true"},
        capture_output=True,
        text=True,
    )
    assert desk.returncode == 0
    assert ci.returncode == 1 and "not on tests/allowed-skips.txt" in ci.stderr


def test_an_xfail_fails_the_run(tmp_path):
    xfail = (
        '<testcase classname="tests.unit.test_a" name="test_flaky" time="0">'
        '<skipped type="pytest.xfail" message="upstream bug" /></testcase>'
    )
    [problem] = check_pytest_run.check(report(tmp_path, PASSED, xfail), 2, ["upstream bug"])
    assert problem.startswith("expected to fail") and "test_a::test_flaky" in problem


def test_an_entry_without_a_reason_is_refused(tmp_path):
    bad = tmp_path / "allowed.txt"
    bad.write_text("# header\nsome skip reason\n")
    with pytest.raises(SystemExit, match=r"allowed\.txt:2"):
        check_pytest_run.allowed_reasons(bad)


def test_command_line_exit_status(tmp_path):
    path = report(tmp_path, PASSED)
    ok = subprocess.run([sys.executable, str(SCRIPT), str(path), "--expect", "1"])
    short = subprocess.run(
        [sys.executable, str(SCRIPT), str(path), "--expect", "2"], capture_output=True, text=True
    )
    assert ok.returncode == 0
    assert short.returncode == 1 and short.stderr.startswith("check_pytest_run: ")


def test_the_lanes_reports_count_together_and_a_test_in_two_is_named(tmp_path):
    """scripts/test.sh runs tests/unit and tests/integration in lanes, a report each."""
    unit = report(tmp_path, PASSED)
    other = tmp_path / "integration.xml"
    other.write_text(
        report(
            tmp_path / "..", '<testcase classname="tests.integration.test_b" name="t"/>'
        ).read_text()
    )
    assert check_pytest_run.check([unit, other], 2, []) == []
    [short] = check_pytest_run.check([unit, other], 3, [])
    assert "2 tests in the run, but the suite holds 3" in short
    twice = tmp_path / "again.xml"
    twice.write_text(unit.read_text())
    [dup] = check_pytest_run.check([unit, other, twice], 2, [])
    assert dup == "in two reports (report.xml, again.xml): tests.unit.test_a::test_ok"
    p = subprocess.run(
        [sys.executable, str(SCRIPT), str(unit), str(other), "--expect", "2"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
