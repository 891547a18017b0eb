"""scripts/timings.py refresh (`make timings`): a run's recorded seconds become the committed
file's modules and slow tests; a whole run drops what the suite no longer has, a partial
one replaces only what it ran; a bad record is one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "timings.py"
sys.path.insert(0, str(ROOT / "scripts"))
import timings  # noqa: E402

from tests.scheduling import Timings  # noqa: E402

OLD = {
    "about": "x",
    "runs": [],
    "modules": {
        "tests/integration/test_gone.py": {"seconds": 50.0, "tests": 2},
        "tests/integration/test_kept.py": {"seconds": 80.0, "tests": 4},
        "tests/unit/test_u.py": {"seconds": 1.0, "tests": 10},
    },
    "tests": {
        "tests/integration/test_kept.py::slow": 70.0,
        "tests/integration/test_gone.py::g": 45,
    },
}
RUN = {
    "tests/unit/test_u.py::a": 0.2,
    "tests/unit/test_u.py::b": 2.5,
    "tests/integration/test_new.py::n": 30.0,
}


def test_a_whole_run_replaces_everything():
    doc = timings.refresh(OLD, RUN, [{"whole": True, "workers": 2}])
    assert doc["modules"] == {
        "tests/integration/test_new.py": {"seconds": 30.0, "tests": 1},
        "tests/unit/test_u.py": {"seconds": 2.7, "tests": 2},
    }
    assert doc["tests"] == {
        "tests/integration/test_new.py::n": 30.0,
        "tests/unit/test_u.py::b": 2.5,
    }
    assert doc["runs"] == [{"workers": 2, "whole": True}]


def test_a_partial_run_replaces_only_the_modules_it_ran():
    doc = timings.refresh(OLD, RUN, [{"whole": False}])
    assert set(doc["modules"]) == {
        "tests/integration/test_gone.py",
        "tests/integration/test_kept.py",
        "tests/integration/test_new.py",
        "tests/unit/test_u.py",
    }
    assert doc["modules"]["tests/unit/test_u.py"] == {"seconds": 2.7, "tests": 2}
    assert doc["tests"]["tests/integration/test_kept.py::slow"] == 70.0


def test_the_file_written_loads_back_and_reads_line_by_line(tmp_path):
    doc = timings.refresh(OLD, RUN, [{"whole": True}])
    out = tmp_path / "timings.json"
    out.write_text(timings.dump(doc))
    assert json.loads(out.read_text()) == doc
    assert '"tests/unit/test_u.py": {"seconds": 2.7, "tests": 2}' in out.read_text().splitlines()
    loaded = Timings.load(out)
    assert loaded.modules["tests/integration/test_new.py"] == (30.0, 1)
    assert loaded.tests == {
        "tests/integration/test_new.py::n": 30.0,
        "tests/unit/test_u.py::b": 2.5,
    }


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT
    )


def test_refresh_from_records(tmp_path):
    rec = tmp_path / "durations-unit.json"
    rec.write_text(json.dumps({"run": {"whole": True}, "tests": RUN}))
    out = tmp_path / "timings.json"
    p = cli("refresh", str(rec), "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert "3 tests" in p.stdout and "a whole run" in p.stdout
    assert set(json.loads(out.read_text())["modules"]) == {
        "tests/integration/test_new.py",
        "tests/unit/test_u.py",
    }


@pytest.mark.parametrize("content", ["", "{}", '{"tests": {"a": "slow"}}'])
def test_a_bad_record_is_one_line_and_exit_2(tmp_path, content):
    rec = tmp_path / "durations-x.json"
    rec.write_text(content)
    out = tmp_path / "timings.json"
    p = cli("refresh", str(rec), "--out", str(out))
    assert p.returncode == 2
    assert len(p.stderr.splitlines()) == 1 and str(rec) in p.stderr
    assert not out.exists()


def test_plan_prints_the_makespan(tmp_path):
    doc = timings.refresh({}, RUN, [{"whole": True}])
    out = tmp_path / "timings.json"
    out.write_text(timings.dump(doc))
    p = cli("plan", "--workers", "2", "--timings", str(out))
    assert p.returncode == 0, p.stderr
    assert "makespan 30 s" in p.stdout


def test_junit_reports_map_back_to_node_ids(tmp_path):
    """A report from a run that did not record (CI's, an older branch): classname is the
    module's dotted path, then any classes."""
    xml = tmp_path / "pytest.xml"
    xml.write_text(
        '<?xml version="1.0"?><testsuites>'
        '<testsuite name="pytest" timestamp="2026-11-28T17:35:44.437105+00:00" time="2042.1">'
        '<testcase classname="tests.unit.scripts.test_timings" name="test_plan[x]" time="2.5"/>'
        '<testcase classname="tests.unit.harness.test_scheduling.Cls" name="t" time="0.5"/>'
        '<testcase classname="tests.unit.gone" name="t" time="9"/>'
        "</testsuite></testsuites>"
    )
    seconds, runs = timings.read_junit([xml], whole=True)
    assert seconds == {
        "tests/unit/scripts/test_timings.py::test_plan[x]": 2.5,
        "tests/unit/harness/test_scheduling.py::Cls::t": 0.5,
    }
    assert runs == [{"whole": True, "started": "2026-11-28T17:35:44Z", "wall_seconds": 2042.1}]
    out = tmp_path / "timings.json"
    p = cli("refresh", "--junit", str(xml), "--whole", "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert json.loads(out.read_text())["tests"] == {
        "tests/unit/scripts/test_timings.py::test_plan[x]": 2.5
    }


def test_a_parallel_run_records_every_test_once_and_make_timings_folds_it_in(tmp_path):
    """The real thing end to end: pytest with 2 xdist workers and --record-timings (the
    controller sees every report), then `timings.py refresh` on the record."""
    files = ["tests/unit/harness/test_loadscale.py", "tests/unit/scripts/test_pytest_workers.py"]
    record, junit, out = tmp_path / "rec.json", tmp_path / "j.xml", tmp_path / "timings.json"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2"]
    argv += ["--dist", "loadscope", f"--record-timings={record}", "--whole-suite"]
    argv += [f"--junitxml={junit}", *files]
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    p = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    ran = [
        f"{c.get('classname').replace('.', '/')}.py::{c.get('name')}"
        for c in ET.parse(junit).getroot().iter("testcase")
    ]
    data = json.loads(record.read_text())
    assert sorted(data["tests"]) == sorted(ran) and len(ran) > 4
    assert data["run"]["workers"] == 2 and data["run"]["whole"] is True
    assert all(s >= 0 for s in data["tests"].values()) and sum(data["tests"].values()) > 0
    r = cli("refresh", str(record), "--out", str(out))
    assert r.returncode == 0, r.stderr
    t = Timings.load(out)
    assert set(t.modules) == set(files)
    assert sum(n for _, n in t.modules.values()) == len(ran)
