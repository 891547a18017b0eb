"""``fleetmedic scan`` as a user runs it: JSON Lines contract, table, stdin, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from scan_helpers import DATA, assert_valid

from fleetmedic.scan import JSON_FIELDS
from fleetmedic.scan.finding import Finding

XID79 = "[ 100.0] NVRM: Xid (PCI:0000:3B:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
XID13 = "[ 101.0] NVRM: Xid (PCI:0000:3b:00): 13, pid=42, name=python3, Graphics Exception: ESR 0x51c730=0x8\n"


def scan(*args, stdin=None):
    return subprocess.run(
        [sys.executable, "-m", "fleetmedic", "scan", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_json_lines_have_exactly_the_contract_fields(tmp_path: Path):
    log = tmp_path / "kern.log"
    log.write_text("noise\n" + XID79 + XID13 + XID79)
    result = scan("--format", "json", str(log))
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [tuple(row) for row in rows] == [JSON_FIELDS] * 2
    assert rows[0] == {
        "line": 2,
        "vendor": "nvidia",
        "kind": "xid",
        "code": 79,
        "pci": "0000:3b:00",
        "action": "reboot",
        "bucket": "RESTART_BM",
        "message": "GPU has fallen off the bus.",
    }
    assert rows[1]["code"] == 13 and rows[1]["action"] == "monitor"
    for row in rows:
        assert_valid(Finding(**row))


def test_no_dedup_reports_every_line(tmp_path: Path):
    log = tmp_path / "kern.log"
    log.write_text(XID79 * 3)
    assert len(scan("--format", "json", str(log)).stdout.splitlines()) == 1
    assert [
        json.loads(x)["line"]
        for x in scan("--format", "json", "--no-dedup", str(log)).stdout.splitlines()
    ] == [1, 2, 3]


def test_stdin_when_no_file_or_dash():
    for args in ((), ("-",)):
        result = scan("--format", "json", *args, stdin=XID79)
        assert result.returncode == 0
        assert json.loads(result.stdout)["code"] == 79


def test_non_gpu_lines_print_nothing():
    result = scan("--format", "json", stdin="kernel: usb 1-1: new device\nhello\n")
    assert (result.returncode, result.stdout) == (0, "")
    table = scan(stdin="hello\n")
    assert table.returncode == 0 and table.stdout == ""
    assert "No GPU faults found" in table.stderr


def test_unreadable_input_exits_2_with_one_line(tmp_path: Path):
    for target in (tmp_path / "missing.log", tmp_path):
        result = scan(str(target))
        assert result.returncode == 2
        assert result.stdout == ""
        assert len(result.stderr.strip().splitlines()) == 1
        assert result.stderr.startswith("fleetmedic scan: error: cannot read")


def test_unreadable_second_file_fails_before_any_output(tmp_path: Path):
    good = tmp_path / "good.log"
    good.write_text(XID79)
    result = scan("--format", "json", str(good), str(tmp_path / "missing.log"))
    assert result.returncode == 2 and result.stdout == ""


def test_table_is_readable(tmp_path: Path):
    result = scan(str(DATA / "nvsentinel-155.dmesg"), str(DATA / "rocm-6273.dmesg"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["LINE", "ACTION", "KIND", "CODE", "PCI", "BUCKET", "MESSAGE"]
    assert (
        "nvsentinel-155.dmesg:5" in lines[1] and "REBOOT" in lines[1] and "0000:b3:00" in lines[1]
    )
    assert lines[-1].startswith("5 findings (1 reboot, 2 reset, 2 monitor)")
    assert "Worst: reboot" in lines[-1] and "node needs a reboot" in lines[-1]


def test_every_fixture_scans_cleanly():
    for path in sorted(DATA.iterdir()):
        result = scan("--format", "json", str(path))
        assert result.returncode == 0, (path, result.stderr)


def test_follow_a_growing_file(tmp_path: Path):
    log = tmp_path / "kern.log"
    log.write_text("")
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetmedic", "scan", "--follow", "--format", "json", str(log)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1.0)
        with open(log, "a") as handle:
            handle.write(XID79)
        line = proc.stdout.readline()
        assert json.loads(line)["code"] == 79
    finally:
        proc.terminate()
        proc.wait(timeout=10)
