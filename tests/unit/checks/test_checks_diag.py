"""dcgmi diag -j: the parser on published outputs, and the runner against a fake dcgmi that
replays them (pass, fail, timeout, tool missing). Sources: tests/unit/checks/data/dcgm/README.md."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from fleetmedic.checks import diag
from tests.fakes.diag import replay

DATA = Path(__file__).parent / "data" / "dcgm"
FAKE = Path(__file__).parents[2] / "fakes" / "diag" / "replay.py"


def test_parse_real_dcgm_310_output() -> None:
    version, results = diag.parse_dcgm((DATA / "pass-3.1.0.txt").read_text())
    assert version == "3.1.0"
    assert results[0].name == "Denylist" and results[0].gpus == tuple(range(8))
    software = [r for r in results if r.name == "software"]
    assert [r.gpus for r in software] == [(i,) for i in range(8)]
    assert {r.status for r in results} == {"pass"}
    assert diag.evaluate(1, (DATA / "pass-3.1.0.txt").read_text()).status == "ok"


def test_failed_test_maps_to_a_rung_per_gpu() -> None:
    r = diag.evaluate(3, (DATA / "fail-sm-stress.json").read_text())
    assert r.status == "problem" and r.action == "manual"
    assert r.summary == "dcgmi diag -r 3 failed: SM Stress (GPU 0)"
    (failed,) = r.evidence["failed"]
    assert failed["gpus"] == [0] and "HW slowdown" in failed["warnings"][0]
    assert len(r.evidence["tests"]) == 3  # kept as evidence, passes too


def test_unmapped_failure_has_no_rung() -> None:
    text = (DATA / "fail-sm-stress.json").read_text().replace("SM Stress", "New Test")
    assert diag.evaluate(2, text, catalog=diag.load_catalog()).action is None


def test_not_a_diagnostic_is_unknown() -> None:
    assert diag.evaluate(1, "Error: unable to connect to host engine").status == "unknown"
    assert diag.evaluate(1, '{"DCGM GPU Diagnostic": {"version": "4.2.3"}}').status == "unknown"


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    exe = tmp_path / "dcgmi"
    exe.write_text(f'#!/bin/sh\nFAKE_DIAG_TOOL=dcgmi exec {sys.executable} {FAKE} "$@"\n')
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DIAG_LOG", str(tmp_path / "diag-calls.jsonl"))
    return exe


def asked(fake: Path) -> list[tuple[str, int | None]]:
    """What the fake dcgmi was asked for (its own invocation log): (tool, level) a run."""
    return [(c["tool"], c["level"]) for c in replay.calls(fake.parent / "diag-calls.jsonl")]


def test_runner_pass_and_fail(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_DCGMI_OUTPUT", str(DATA / "pass-3.1.0.txt"))
    assert diag.run_dcgm(1).status == "ok"
    monkeypatch.setenv("FAKE_DCGMI_OUTPUT", str(DATA / "fail-sm-stress.json"))
    monkeypatch.setenv("FAKE_DCGMI_EXIT", "226")  # dcgmi exits non-zero when a test fails
    r = diag.run_dcgm(2)
    assert r.status == "problem" and r.evidence["level"] == 2
    assert asked(fake) == [("dcgmi", 1), ("dcgmi", 2)]


def test_runner_timeout_and_missing_tool(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_DCGMI_OUTPUT", str(DATA / "pass-3.1.0.txt"))
    monkeypatch.setenv("FAKE_DCGMI_HANG", "30")
    r = diag.run_dcgm(1, timeout=0.5)
    assert r.status == "unknown" and "timed out after 0.5 s" in r.summary
    r = diag.run_dcgm(1, dcgmi="dcgmi-not-installed")
    assert r.status == "unknown" and "not found" in r.summary


def test_cli_json_and_exit_code(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from click.testing import CliRunner

    from fleetmedic.cli import cli

    monkeypatch.setenv("FAKE_DCGMI_OUTPUT", str(DATA / "fail-sm-stress.json"))
    out = CliRunner().invoke(cli, ["diag", "--level", "2", "--json"])
    assert out.exit_code == 1
    data = json.loads(out.output)
    assert data["action"] == "manual" and data["evidence"]["failed"][0]["name"] == "SM Stress"
    assert asked(fake) == [("dcgmi", 2)]
    out = CliRunner().invoke(cli, ["diag", "-r", "5"])  # auto: dcgmi is installed
    assert out.exit_code == 2 and "DCGM has levels 1-4, not 5" in out.output
    out = CliRunner().invoke(cli, ["diag", "-r", "6"])
    assert out.exit_code == 2 and "6 is not in the range" in out.output
    assert asked(fake) == [("dcgmi", 2)], "a refused level reached the tool"


def test_cli_fabric_adds_the_rdma_ports_and_the_worse_exit(
    fake: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import json

    from click.testing import CliRunner
    from test_checks_fabric import write_port

    from fleetmedic.cli import cli
    from fleetmedic.policy import quarantine

    sysfs = tmp_path / "sys"
    write_port(sysfs, "mlx5_0", "1")
    config = tmp_path / "check.yaml"
    config.write_text(f"fabric:\n  sysfs_root: {sysfs}\n")
    monkeypatch.setenv("FAKE_DCGMI_OUTPUT", str(DATA / "pass-3.1.0.txt"))
    argv = ["diag", "-r", "3", "--fabric", "--json", "--config", str(config)]
    out = CliRunner().invoke(cli, argv)
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert [(r["name"], r["status"]) for r in doc["fabric"]] == [("fabric.ports", "ok")]
    assert quarantine.judge("ok", out.output).recommendation == quarantine.RETURN
    write_port(sysfs, "mlx5_0", "1", {"state": "1: DOWN\n", "phys_state": "3: Disabled\n"})
    out = CliRunner().invoke(cli, argv)
    assert out.exit_code == 1, "the diagnostics passed; the fabric did not"
    res = quarantine.judge("ok", out.output)
    assert res.recommendation == quarantine.REPLACE and "mlx5_0/1 DOWN/Disabled" in res.summary
    assert len(res.tests) == len(json.loads(out.output)["evidence"]["tests"])
