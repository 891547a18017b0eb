"""pytest-timeout's limit stretches with the load factor (tests/harness/timeout_scaling.py):
a pytest run of its own, in a directory of its own, with the factor fixed by
FLEETMEDIC_TEST_LOAD_FACTOR."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SLOW_TEST = """
import time

def test_slow():
    time.sleep(2)
"""


def run_with_factor(tmp_path: Path, factor: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_slow.py").write_text(SLOW_TEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the tree's settings
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FLEETMEDIC_TEST_LOAD_FACTOR": factor}
    env.pop("PYTEST_ADDOPTS", None)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # only the two plugins at hand: a quick start
    argv = [sys.executable, "-m", "pytest", "-p", "pytest_timeout"]
    argv += ["-p", "tests.harness.timeout_scaling"]
    argv += ["-p", "no:cacheprovider", "--timeout=1", "test_slow.py"]
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("factor", ["1", "4"])
def test_the_limit_is_the_configured_one_times_the_load_factor(tmp_path, factor):
    r = run_with_factor(tmp_path, factor)
    out = r.stdout + r.stderr
    if factor == "1":  # an idle machine: 1 s, and the 2 s test is cut
        assert r.returncode == 1 and "Timeout (>1.0s" in out, out
    else:  # load 4 per CPU: 4 s, and the same test passes
        assert r.returncode == 0 and "1 passed" in out, out
