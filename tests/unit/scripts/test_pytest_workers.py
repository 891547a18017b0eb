"""scripts/pytest_workers.py: the suite's worker count follows the machine (CPUs, free
memory), FLEETMEDIC_PYTEST_WORKERS overrides it, and a bad value is one line, exit 2."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "pytest_workers.py"
_spec = importlib.util.spec_from_file_location("pytest_workers", SCRIPT)
pw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pw)


@pytest.mark.parametrize(
    ("cpu", "free", "want"),
    [
        (2, 24.0, 2),  # this machine: one per CPU
        (2, 4.0, 2),  # memory allows two
        (2, 1.0, 1),  # not even one worker's worth: serial
        (16, 200.0, 16),
        (16, 12.0, 6),
    ],
)
def test_sized_by_cpu_and_memory(cpu, free, want):
    assert pw.workers(cpu, free) == want


def test_the_override_wins_and_bad_values_are_refused():
    assert pw.workers(2, 24.0, "1") == 1
    assert pw.workers(2, 1.0, "4") == 4
    assert pw.workers(2, 24.0, "") == 2
    for bad in ("0", "-1", "two", "2.5"):
        with pytest.raises(ValueError, match="FLEETMEDIC_PYTEST_WORKERS"):
            pw.workers(2, 24.0, bad)


def test_command_line(tmp_path):
    env = {**os.environ, "FLEETMEDIC_PYTEST_WORKERS": "1"}
    assert subprocess.run(
        [sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True
    ).stdout == ("1\n")
    env["FLEETMEDIC_PYTEST_WORKERS"] = "many"
    p = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    env.pop("FLEETMEDIC_PYTEST_WORKERS")
    n = int(subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True).stdout)
    assert 1 <= n <= len(os.sched_getaffinity(0)) + 1


def test_meminfo(tmp_path):
    f = tmp_path / "meminfo"
    f.write_text("MemTotal:       24000000 kB\nMemAvailable:   8388608 kB\n")
    assert pw.mem_available_gib(str(f)) == 8.0
