"""The burn-in's collective test: all_reduce_perf's published output parsed, judged against
the hardware profile's expected_busbw_gbps, and `fleetmedic collective` end to end with the
fake all_reduce_perf (tests/fakes/nccl)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fleetmedic.checks import collective
from fleetmedic.checks.collectivecli import collective_cmd

ROOT = Path(__file__).resolve().parents[3]
FAKE = ROOT / "tests" / "fakes" / "nccl" / "allreduce.py"
ROWS = """\
# nThread 1 nGpus 8 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20
#
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    40.10    0.00    0.00      0    39.80    0.00    0.00      0
   536870912     134217728     float     sum      -1   2301.2  233.30  408.27      0   2298.0  233.62  408.84      0
  1073741824     268435456     float     sum      -1   4410.5  243.45  426.04      0   4415.1  243.20  425.60      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 278.3700
#
"""  # noqa: E501


def test_the_largest_size_and_the_average_are_read():
    sweep = collective.parse(ROWS)
    assert sweep == collective.Sweep(1 << 30, 426.04, 278.37, 0, 3)


def test_judged_against_the_figure_within_its_tolerance():
    sweep = collective.parse(ROWS)
    good = collective.judge(sweep, (460.0, 0.2), profile="p5", gpus=8)
    assert good.status == "ok"
    assert good.summary == (
        "all_reduce bus bandwidth 426.0 GB/s at 1 GiB on 8 GPUs, expected 460 GB/s "
        "(at least 368.0, 20% below)"
    )
    slow = collective.judge(sweep, (460.0, 0.05), profile="p5", gpus=8)
    assert slow.status == "problem" and slow.evidence["floor_gbps"] == 437.0
    none = collective.judge(sweep, None, profile="generic-8gpu", gpus=8)
    assert none.status == "unknown"
    assert "hardware profile generic-8gpu states no expected_busbw_gbps" in none.summary


def test_wrong_values_fail_whatever_the_speed():
    bad = ROWS.replace("408.27      0", "408.27      3")
    result = collective.judge(collective.parse(bad), (100.0, 0.2), profile=None, gpus=8)
    assert result.status == "problem" and "3 wrong values" in result.summary


def test_no_table_is_unknown():
    failed = "host: Test CUDA failure common.cu:1011 'no CUDA-capable device is detected'\n"
    assert collective.parse(failed) is None
    result = collective.judge(None, (100.0, 0.2), profile=None, gpus=2, failure="exit 1")
    assert result.status == "unknown"


@pytest.fixture
def program(tmp_path: Path, monkeypatch):
    """The fake all_reduce_perf at 300 GB/s on 2 GPUs, as one executable."""
    scenario = tmp_path / "nvml.json"
    scenario.write_text(json.dumps({"gpus": [{}, {}], "busbw_gbps": 300}))
    monkeypatch.setenv("FLEETMEDIC_FAKE_NVML", str(scenario))
    exe = tmp_path / "all_reduce_perf"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
    exe.chmod(0o755)
    return scenario, exe


def run(exe: Path, tmp_path: Path, *args: str):
    cfg = tmp_path / "check.yaml"
    if not cfg.exists():
        cfg.write_text("expected_gpus: 2\n")
    argv = ["--json", "--program", str(exe), "--config", str(cfg), *args]
    return CliRunner().invoke(collective_cmd, argv)


@pytest.mark.parametrize(("busbw", "code", "status"), [(300, 0, "ok"), (180, 1, "problem")])
def test_the_command_against_the_profile_the_label_picks(program, tmp_path, busbw, code, status):
    scenario, exe = program
    scenario.write_text(json.dumps({"gpus": [{}, {}], "busbw_gbps": busbw}))
    profiles = tmp_path / "hw.yaml"
    profiles.write_text("profiles:\n  lab:\n    match: [lab-2gpu]\n    expected_busbw_gbps: 300\n")
    (tmp_path / "check.yaml").write_text(f"expected_gpus: 2\nhardware: {{profiles: {profiles}}}\n")
    r = run(exe, tmp_path, "--label", "node.kubernetes.io/instance-type=lab-2gpu")
    assert r.exit_code == code, r.output
    doc = json.loads(r.output)
    assert doc["status"] == status
    assert doc["evidence"]["profile"] == "lab" and doc["evidence"]["gpus"] == 2
    assert doc["evidence"]["expected_gbps"] == 300


def test_a_figure_given_outright_and_no_figure_at_all(program, tmp_path):
    _, exe = program
    r = run(exe, tmp_path, "--expected-busbw", "300", "--tolerance", "0.01")
    assert r.exit_code == 1 and "at least 297.0" in json.loads(r.output)["summary"]
    r = run(exe, tmp_path)
    assert r.exit_code == 2
    doc = json.loads(r.output)
    assert doc["status"] == "unknown"
    assert doc["summary"].endswith(
        "no hardware profile matches this node (no expected_busbw_gbps) to compare with"
    )


def test_usage_errors_are_one_line(program, tmp_path):
    _, exe = program
    r = run(exe, tmp_path, "--profile", "nope")
    assert r.exit_code == 2 and "no hardware profile named 'nope'" in r.output
    r = run(exe, tmp_path, "--label", "novalue")
    assert r.exit_code == 2 and "--label wants KEY=VALUE" in r.output
    assert "Traceback" not in r.output
