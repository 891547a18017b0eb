"""``fleetmedic scan`` as a user runs it: JSON Lines contract, table, stdin, exit codes."""

from __future__ import annotations

import contextlib
import json
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from scan_helpers import DATA, assert_valid

from fleetmedic.scan import JSON_FIELDS, Scanner
from fleetmedic.scan.finding import Finding
from tests.harness import loadscale

XID79 = "[ 100.0] NVRM: Xid (PCI:0000:3B:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
XID13 = "[ 101.0] NVRM: Xid (PCI:0000:3b:00): 13, pid=42, name=python3, Graphics Exception: ESR 0x51c730=0x8\n"


def scan(*args, stdin=None):
    return subprocess.run(
        [sys.executable, "-m", "fleetmedic", "scan", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=loadscale.guard(120),
    )


def test_json_lines_have_exactly_the_contract_fields(tmp_path: Path):
    log = tmp_path / "kern.log"
    log.write_text("noise\n" + XID79 + XID13 + XID79)
    result = scan("--json", str(log))
    assert result.returncode == 1, result.stderr  # Xid 79 fences (reboot): exit 1
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
    assert len(scan("--json", str(log)).stdout.splitlines()) == 1
    assert [
        json.loads(x)["line"] for x in scan("--json", "--no-dedup", str(log)).stdout.splitlines()
    ] == [1, 2, 3]


def test_stdin_when_no_file_or_dash():
    for args in ((), ("-",)):
        result = scan("--json", *args, stdin=XID79)
        assert result.returncode == 1  # read, and Xid 79 fences
        assert json.loads(result.stdout)["code"] == 79


def test_non_gpu_lines_print_nothing():
    result = scan("--json", stdin="kernel: usb 1-1: new device\nhello\n")
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
    result = scan("--json", str(good), str(tmp_path / "missing.log"))
    assert result.returncode == 2 and result.stdout == ""


def test_table_is_readable(tmp_path: Path):
    result = scan(str(DATA / "nvsentinel-155.dmesg"), str(DATA / "rocm-6273.dmesg"))
    assert result.returncode == 1, result.stderr  # a reboot finding fences: exit 1
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["LINE", "ACTION", "KIND", "CODE", "PCI", "BUCKET", "MESSAGE"]
    assert (
        "nvsentinel-155.dmesg:5" in lines[1] and "REBOOT" in lines[1] and "0000:b3:00" in lines[1]
    )
    assert lines[-1].startswith("5 findings (1 reboot, 2 reset, 2 monitor)")
    assert "Worst: reboot" in lines[-1] and "node needs a reboot" in lines[-1]


def test_every_fixture_scans_cleanly():
    for path in sorted(DATA.iterdir()):
        result = scan("--json", "--fail-on", "never", str(path))
        assert result.returncode == 0, (path, result.stderr)
        assert result.stderr == ""


@contextlib.contextmanager
def following(log: Path, text: str) -> Iterator[subprocess.Popen]:
    """``fleetmedic scan --follow --json`` of an empty ``log`` that gets ``text`` appended
    once the follower is up; the process, stopped afterwards."""
    log.write_text("")
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetmedic", "scan", "--follow", "--json", str(log)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1.0)
        with open(log, "a") as handle:
            handle.write(text)
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_follow_a_growing_file(tmp_path: Path):
    with following(tmp_path / "kern.log", XID79) as proc:
        line = proc.stdout.readline()
        assert json.loads(line)["code"] == 79


def test_exit_1_only_at_or_above_fail_on(tmp_path: Path):
    log = tmp_path / "kern.log"
    log.write_text(XID13)  # monitor
    assert scan(str(log)).returncode == 0  # default: only a fencing action fails
    assert scan("--fail-on", "monitor", str(log)).returncode == 1
    log.write_text(XID79)  # reboot
    assert scan("--json", str(log)).returncode == 1
    assert scan("--fail-on", "reimage", str(log)).returncode == 0
    assert scan("--fail-on", "never", str(log)).returncode == 0


def test_binary_file_is_refused_with_one_line(tmp_path: Path):
    result = scan("/bin/ls")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "fleetmedic scan: error: /bin/ls is a binary file, not a kernel log\n"
    piped = scan(stdin="\x00\x01ELF" + XID79)
    assert piped.returncode == 2 and "stdin is a binary file" in piped.stderr


def test_a_terminal_on_stdin_gets_a_hint_instead_of_silence():
    import os
    import pty

    main, child = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetmedic", "scan"],
        stdin=child,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(child)
    try:
        hint = proc.stderr.readline()
        assert "reading a kernel log from the terminal" in hint and "Ctrl-D" in hint
        os.write(main, b"\x04")  # Ctrl-D: end of input
        assert proc.wait(timeout=loadscale.guard(60)) == 0
    finally:
        proc.kill()
        os.close(main)


def test_json_is_the_one_machine_output_flag(tmp_path: Path):
    log = tmp_path / "kern.log"
    log.write_text(XID79)
    assert json.loads(scan("--json", str(log)).stdout)["code"] == 79
    refused = scan("--format", "json", str(log))
    assert refused.returncode == 2 and "--format" in refused.stderr
    assert "--format" not in scan("--help").stdout


def test_help_documents_exit_codes_and_examples():
    text = scan("--help").stdout
    words = " ".join(text.split())
    assert "Exits 1 when a finding's action is --fail-on or stronger" in words
    assert "Exit status: 0 ok 1 the checked thing is unhealthy or has findings" in words
    assert "2 usage or config error 3 could not reach a dependency" in words
    assert "Examples:" in text and "fleetmedic scan --unknown" in text


def test_unknown_lists_unmatched_driver_errors_by_shape(tmp_path: Path):
    log = tmp_path / "kern.log"
    log.write_text(
        "[   84.300476] NVRM: GPU6 kbusSendSysmembarSingle_GH100: - timeout error waiting for"
        " startToken = 0x3 cnt=24105122\n"
        "[   84.300477] NVRM: GPU6 kbusSendSysmembarSingle_GH100: - timeout error waiting for"
        " startToken = 0x5 cnt=24105199\n"
        "[Wed Jun  8 16:34:52 2022] [drm:dc_dmub_srv_wait_idle [amdgpu]] *ERROR* Error waiting"
        " for DMUB idle: status=3\n" + XID79
    )
    result = scan("--unknown", "--json", str(log))
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["count"], r["rule"], r["line"]) for r in rows] == [
        (2, "nvrm.unclassified", 1),
        (1, "amdgpu.unclassified", 3),
    ]
    assert "startToken = <hex> cnt=<n>" in rows[0]["shape"]
    table = scan("--unknown", str(log)).stdout.splitlines()
    assert table[0].split() == ["COUNT", "RULE", "GPUS", "FIRST", "SHAPE"]
    assert table[1].split()[:2] == ["2", "nvrm.unclassified"]
    assert scan("--unknown", stdin=XID79).stdout == "No unknown driver errors found.\n"


def test_journal_without_journalctl_exits_3_with_one_line(tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "fleetmedic", "scan", "--follow", "journal"],
        capture_output=True,
        text=True,
        timeout=loadscale.guard(120),
        env={"PATH": str(tmp_path), "PYTHONPATH": ":".join(sys.path)},
    )
    assert result.returncode == 3, result.stderr
    assert result.stderr.startswith("fleetmedic scan: error: cannot run journalctl")
    assert len(result.stderr.splitlines()) == 1


def test_unknown_does_not_follow():
    result = scan("--unknown", "--follow", "/dev/null")
    assert result.returncode == 2 and "--unknown reads whole files" in result.stderr


def test_scan_reads_a_fabric_manager_log_file(tmp_path: Path):
    """Issue 39 item 3: Fabric Manager's own log through the same command (published
    lines: leptonai/gpud's Fabric Manager tests and testdata)."""
    log = tmp_path / "fabricmanager.log"
    log.write_text(
        "[Feb 25 2025 13:59:45] [INFO] [tid 1808] multicast group 0 is freed.\n"
        "[Jul 09 2024 18:14:07] [ERROR] [tid 12727] detected NVSwitch non-fatal error 12028 on "
        "fid 0 on NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 61\n"
        "[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error 20034 on fid 0 "
        "on NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 33\n"
    )
    result = scan("--json", str(log))
    assert result.returncode == 1, result.stderr  # the fatal one fences
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["line"], r["kind"], r["code"], r["pci"], r["action"]) for r in rows] == [
        (2, "fabricmanager", 12028, "0000:86:00", "monitor"),
        (3, "fabricmanager", 20034, "0000:86:00", "reset"),
    ]


def test_scan_shows_a_gb200_records_decoded_details(tmp_path: Path):
    """Issue 39: a GPU NVL record's detail lines, read into its finding (the published
    record of phatut/nmx-c-analyzers examples/sample_input_logs.txt @70f8d9f, as in
    test_scan_fabricmanager_gb200.py), in the table and in --json."""
    from test_scan_fabricmanager_gb200 import NMXC_FATAL, NMXC_NON_FATAL

    log = tmp_path / "fabricmanager.log"
    log.write_text("\n".join(NMXC_NON_FATAL + NMXC_FATAL) + "\n")
    result = scan("--json", str(log))
    assert result.returncode == 1, result.stderr  # the Fatal record fences (reset)
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["line"], r["kind"], r["action"]) for r in rows] == [
        (1, "fabricmanager", "monitor"),
        (15, "fabricmanager", "monitor"),
        (16, "fabricmanager", "reset"),
    ]
    assert rows[0]["message"].endswith(
        "errorCode 0x02/0x07 = Xid 149 NETIR (port down event); "
        "gpuGuid 0xb0cf0e0300e42e00 port 61; node 6 module 1"
    )
    assert "errorCode 0x03/0x01 = Xid 150 MSE" in rows[2]["message"]
    table = scan(str(log))
    assert "Xid 149 NETIR" in table.stdout and "Xid 150 MSE" in table.stdout, table.stdout


def test_fabric_manager_rules_stay_out_of_kernel_log_scans():
    """Their literals would slow the bulk scan of every kernel log (issue 39's speed
    target); a Fabric Manager log is recognised by its own format or its unit's name."""
    from fleetmedic.scan.scanner import is_fabric_log

    assert "GPU NVL" not in Scanner().triggers
    assert "GPU NVL" in Scanner(fabric=True).triggers
    assert is_fabric_log("[Feb 25 2025 13:59:45] [INFO] [tid 1808] multicast group 0 is freed.")
    assert is_fabric_log("Jan 30 11:58:43 node systemd[1]: nvidia-fabricmanager.service: Killing")
    assert not is_fabric_log(XID79 + XID13)


def test_follow_shows_a_record_the_log_ends_on(tmp_path: Path):
    """Issue 39: a GPU NVL record that is the last thing in a followed log is ended once
    the log stays quiet (fmrecord.RECORD_WAIT) and shown with its details, not held until
    the next line (the published record of test_scan_fabricmanager_gb200.py)."""
    from test_scan_fabricmanager_gb200 import NMXC_FATAL

    record = "\n".join(NMXC_FATAL[:-1]) + "\n"  # and nothing after it
    with following(tmp_path / "fabricmanager.log", record) as proc:
        ready, _, _ = select.select([proc.stdout], [], [], loadscale.guard(30))
        assert ready, "the record was held while the log stayed quiet"
        row = json.loads(proc.stdout.readline())
        assert (row["line"], row["kind"], row["action"]) == (1, "fabricmanager", "reset")
        assert "errorCode 0x03/0x01 = Xid 150 MSE" in row["message"]
