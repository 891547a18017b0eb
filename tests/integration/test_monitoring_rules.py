"""deploy/monitoring's alert rules pass promtool (syntax and unit tests), every alert has
a unit test where it fires and one where it stays silent, the example Prometheus config
is valid, and the controller's /metrics passes promtool's lint."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml
from prometheus_client import generate_latest

from fleetmedic.controller.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
MON = ROOT / "deploy" / "monitoring"
RULES = MON / "rules" / "fleetmedic.rules.yaml"
UNIT_TESTS = ROOT / "tests" / "monitoring" / "fleetmedic.rules.test.yaml"


def _run(promtool: Path, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(promtool), *args], capture_output=True, input=input, timeout=120, cwd=ROOT
    )


def _out(p: subprocess.CompletedProcess) -> str:
    return (p.stdout + p.stderr).decode(errors="replace")


def test_promtool_has_a_version(promtool):
    out = _out(_run(promtool, "--version"))
    assert out.startswith("promtool, version 3."), out


def test_rules_pass_promtool_check(promtool):
    p = _run(promtool, "check", "rules", str(RULES))
    assert p.returncode == 0, _out(p)
    shipped = sum(len(g["rules"]) for g in yaml.safe_load(RULES.read_text())["groups"])
    assert f"SUCCESS: {shipped} rules found" in _out(p), "promtool read every rule we ship"


def test_rules_unit_tests_pass(promtool, tmp_path):
    p = _run(promtool, "test", "rules", f"--junit={tmp_path / 'junit.xml'}", str(UNIT_TESTS))
    assert p.returncode == 0, _out(p)
    assert "SUCCESS" in _out(p)
    assert 'failures="0"' in (tmp_path / "junit.xml").read_text()


def test_every_alert_fires_in_one_test_and_stays_silent_in_another():
    alerts = {
        r["alert"]
        for g in yaml.safe_load(RULES.read_text())["groups"]
        for r in g["rules"]
        if "alert" in r
    }
    fires, silent = set(), set()
    for t in yaml.safe_load(UNIT_TESTS.read_text())["tests"]:
        for case in t.get("alert_rule_test", []):
            (fires if case.get("exp_alerts") else silent).add(case["alertname"])
    assert alerts - fires == set(), "alerts never seen firing"
    assert alerts - silent == set(), "alerts never seen silent"


def test_unit_tests_catch_a_broken_rule(promtool, tmp_path):
    """A rule whose threshold is wrong makes the unit tests fail (they are not vacuous)."""
    broken = tmp_path / "rules" / RULES.name
    broken.parent.mkdir()
    broken.write_text(RULES.read_text().replace("> 12 * 3600", "> 14 * 3600"))
    tests = tmp_path / "tests" / UNIT_TESTS.name
    tests.parent.mkdir()
    tests.write_text(
        UNIT_TESTS.read_text().replace(
            "../../deploy/monitoring/rules/fleetmedic.rules.yaml", str(broken)
        )
    )
    p = _run(promtool, "test", "rules", str(tests))
    assert p.returncode != 0
    assert "FleetmedicNodeInManualTooLong" in _out(p)


def test_example_prometheus_config_is_valid(promtool, tmp_path):
    # check config resolves rule_files relative to the config file: copy both.
    shutil.copytree(MON, tmp_path / "monitoring")
    p = _run(promtool, "check", "config", str(tmp_path / "monitoring" / "prometheus.yaml"))
    assert p.returncode == 0, _out(p)
    assert "SUCCESS: 1 rule files found" in _out(p)


def test_controller_metrics_pass_promtool_lint(promtool):
    m = Metrics()
    m.set_states({"healthy": 3, "reboot": 1}, slow_network=0)
    m.remediations.labels(step="reboot", result="pass").inc()
    m.duration.labels(step="reboot").observe(42)
    m.escalations.labels(outcome="ok").inc()
    p = _run(promtool, "check", "metrics", input=generate_latest(m.registry))
    assert p.returncode == 0, _out(p)
