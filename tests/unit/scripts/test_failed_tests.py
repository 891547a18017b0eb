"""scripts/failed_tests.py: CI keeps only the tail of a run, so the failed tests' names are
printed there, read from the JUnit reports pytest itself wrote."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "failed_tests.py"

TESTS = """
import pytest

def test_passes():
    pass

def test_fails():
    assert 1 == 2, "the node stayed cordoned\\nand a second line"

@pytest.fixture
def broken():
    raise RuntimeError("apiserver gone")

def test_setup_errors(broken):
    pass
"""


def junit_of(tmp_path: Path, source: str, name: str) -> Path:
    (tmp_path / f"test_{name}.py").write_text(source)
    report = tmp_path / f"{name}.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            f"--junitxml={report}",
            str(tmp_path / f"test_{name}.py"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert report.exists()
    return report


def run(*reports: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, reports)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_each_failure_and_error_is_one_line_with_its_first_message_line(tmp_path):
    r = run(junit_of(tmp_path, TESTS, "mixed"), tmp_path / "absent.xml")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "== failed tests (2)"
    assert lines[1].split()[:2] == ["failed", "test_mixed::test_fails"]
    assert lines[1].endswith("AssertionError: the node stayed cordoned")
    assert lines[2].split()[:2] == ["error", "test_mixed::test_setup_errors"]
    assert "test_passes" not in r.stdout
    # the first failure's message goes on below the list, and nowhere else
    assert lines[3:5] == ["== the first failure's message goes on", "   and a second line"]
    assert r.stdout.count("second line") == 1


def test_only_the_first_failures_message_goes_on_and_is_cut(tmp_path):
    story = "\\n".join(f"line {i}" for i in range(1, 40))
    source = (
        f'def test_a():\n    assert False, "{story}"\ndef test_b():\n    assert False, "b1\\nb2"\n'
    )
    lines = run(junit_of(tmp_path, source, "story")).stdout.splitlines()
    at = lines.index("== the first failure's message goes on")
    assert lines[at + 1 :] == [f"   line {i}" for i in range(2, 16)]
    assert "b2" not in "\n".join(lines)


def test_a_green_report_prints_nothing(tmp_path):
    r = run(junit_of(tmp_path, "def test_fine():\n    pass\n", "green"))
    assert (r.returncode, r.stdout) == (0, "")


def test_many_failures_are_cut_and_counted(tmp_path):
    source = "".join(f"def test_{i}():\n    assert False\n" for i in range(45))
    lines = run(junit_of(tmp_path, source, "many")).stdout.splitlines()
    assert lines[0] == "== failed tests (45)"
    assert len(lines) == 1 + 40 + 1 and lines[-1].startswith("   ... and 5 more")


def test_an_unreadable_report_is_named(tmp_path):
    bad = tmp_path / "cut.xml"
    bad.write_text("<testsuites><testsuite>")
    r = run(bad)
    assert r.returncode == 0 and "unreadable report" in r.stdout and "cut.xml" in r.stdout


def test_a_long_first_line_goes_on_past_the_cut_before_the_next_lines(tmp_path):
    """Seen in CI: a wait's one-line error ended in the node's last state, and the cut
    at 200 characters left only ``node-2: not back with a boot ti``."""
    head = "x" * 300
    source = f'def test_a():\n    assert False, "{head} last: down\\nsecond"\n'
    lines = run(junit_of(tmp_path, source, "long")).stdout.splitlines()
    assert len(lines[1]) == 3 + 200
    at = lines.index("== the first failure's message goes on")
    second = lines.index("   second")  # (pytest's "assert False" follows)
    shown = lines[1][3:] + "".join(line[3:] for line in lines[at + 1 : second])
    assert shown.endswith(f"{head} last: down") and second > at + 1
