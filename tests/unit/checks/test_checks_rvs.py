"""rvs -r N: the parser on published outputs, and the runner against a fake rvs that replays
them (pass, fail, timeout, tool missing). Sources: tests/unit/checks/data/rvs/README.md."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fleetmedic.checks import diag, rvs
from fleetmedic.cli import cli
from tests.fakes.diag import replay

DATA = Path(__file__).parent / "data" / "rvs"
FAKE = Path(__file__).parents[2] / "fakes" / "diag" / "replay.py"


def test_summary_table_and_overview_of_rvs_1_6() -> None:
    version, results, gpus = rvs.parse_rvs((DATA / "gst-pass-1.6.75.txt").read_text())
    assert version == "1.6.75"
    (gst,) = results
    assert (gst.category, gst.name, gst.status) == ("gst", "gst-Tflops-2K2K2K-trig-fp4", "pass")
    assert gst.gpus == (11806, 27226, 42583, 57875)
    assert len(gpus) == 8
    assert gpus[42583] == {"index": 0, "bdf": "0000:05:00.0", "model": "AMD Instinct MI355X"}
    assert gpus[57875]["bdf"] == "0000:f5:00.0"
    r = rvs.evaluate(3, (DATA / "gst-pass-1.6.75.txt").read_text())
    assert r.status == "ok" and r.summary == "rvs -r 3: 1 actions, none failed"


def test_failed_gpu_named_by_pci_address_and_mapped_by_module() -> None:
    r = rvs.evaluate(4, (DATA / "gst-fail-assembled.txt").read_text())
    assert r.status == "problem" and r.action == "manual"
    assert r.summary == "rvs -r 4 failed: gst-1215Tflops-4K4K8K-rand-fp8 (gst, GPU 0000:15:00.0)"
    by_name = {t["name"]: t for t in r.evidence["tests"]}
    assert by_name["pcie_act_1"]["status"] == "pass"  # peqt true
    # "peers:true" and "bidirectional: false" are not verdicts; the summary says PASS
    assert by_name["xgmi_d2d_unidir_bandwidth"]["status"] == "pass"
    (failed,) = r.evidence["failed"]
    assert failed["gpus"] == [27226] and failed["category"] == "gst"


def test_verdict_lines_without_a_summary_table() -> None:
    r = rvs.evaluate(2, (DATA / "smqt-fail-no-summary.txt").read_text())
    assert r.status == "problem" and r.action == "manual"  # smqt: BIOS BAR sizes
    (failed,) = r.evidence["failed"]
    assert failed["gpus"] == [3254, 33367, 50599]
    assert "GPU 3254,33367,50599" in r.summary


def test_summary_overrides_line_verdicts_and_a_pass_table_line_alone_decides() -> None:
    text = (DATA / "gst-pass-1.6.75.txt").read_text().replace("\x1b[32mPASS", "\x1b[31mFAIL")
    r = rvs.evaluate(3, text)
    assert r.status == "problem" and "gst-Tflops-2K2K2K-trig-fp4 (gst" in r.summary


def test_unmapped_module_has_no_rung_and_no_verdict_is_unknown() -> None:
    text = (DATA / "smqt-fail-no-summary.txt").read_text().replace("smqt", "newmod")
    assert rvs.evaluate(2, text).action is None
    assert rvs.evaluate(1, "ERROR: No supported GPU found").status == "unknown"
    gm = "[RESULT] [302734.503340] [metrics_monitor] gm 1590 started\n"
    assert rvs.evaluate(1, gm).status == "unknown"  # no verdict anywhere


def test_catalog_rungs_are_fencing_actions() -> None:
    from fleetmedic.checks.base import ACTIONS

    for tool in ("dcgm", "rvs"):
        catalog = diag.load_catalog(tool)
        assert catalog and set(catalog.values()) <= set(ACTIONS), tool


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    exe = tmp_path / "rvs"
    exe.write_text(f'#!/bin/sh\nFAKE_DIAG_TOOL=rvs exec {sys.executable} {FAKE} "$@"\n')
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DIAG_LOG", str(tmp_path / "diag-calls.jsonl"))
    return exe


def asked(fake: Path) -> list[tuple[str, int | None]]:
    """What the fake rvs was asked for (its own invocation log): (tool, level) a run."""
    return [(c["tool"], c["level"]) for c in replay.calls(fake.parent / "diag-calls.jsonl")]


def test_runner_pass_fail_timeout_missing(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_RVS_OUTPUT", str(DATA / "gst-pass-1.6.75.txt"))
    assert rvs.run_rvs(3).status == "ok"
    monkeypatch.setenv("FAKE_RVS_OUTPUT", str(DATA / "gst-fail-assembled.txt"))
    monkeypatch.setenv("FAKE_RVS_EXIT", "1")
    assert rvs.run_rvs(4).status == "problem"
    monkeypatch.setenv("FAKE_RVS_HANG", "30")
    r = rvs.run_rvs(2, timeout=0.5)
    assert r.status == "unknown" and r.summary == "rvs -r 2 timed out after 0.5 s"
    r = rvs.run_rvs(2, rvs="rvs-not-installed")
    assert r.status == "unknown" and "not found" in r.summary
    calls = asked(fake)
    assert calls[:2] == [("rvs", 3), ("rvs", 4)]
    # the hung run is killed after 0.5 s: a fake starved in the nice-19 unit lane (a whole
    # run, load 12) may not have written its line by then; "not installed" never runs one
    assert calls[2:] in ([], [("rvs", 2)])


def test_cli_picks_rvs_for_amd(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_RVS_OUTPUT", str(DATA / "gst-fail-assembled.txt"))
    out = CliRunner().invoke(cli, ["diag", "--vendor", "amd", "--level", "5", "--json"])
    assert out.exit_code == 1, out.output
    data = json.loads(out.output)
    assert data["name"] == "diag.rvs" and data["evidence"]["level"] == 5
    out = CliRunner().invoke(cli, ["diag", "--vendor", "nvidia", "--level", "5"])
    assert out.exit_code == 2 and "DCGM has levels 1-4" in out.output
    assert asked(fake) == [("rvs", 5)]
