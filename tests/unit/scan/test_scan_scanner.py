"""The scanner over whole logs: multi-line messages, kmsg records, boots, dedup, both paths
agree."""

from __future__ import annotations

import dataclasses
import io
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scan_helpers import DATA, assert_valid, published_lines

from fleetmedic.scan import Dedup, Scanner, follow_kmsg
from fleetmedic.scan.finding import Finding


def scan_file(name, **kwargs):
    with open(DATA / name, "rb") as handle:
        return list(Scanner(**kwargs).scan_binary(handle))


def scan_lines(name, **kwargs):
    with open(DATA / name, encoding="utf-8") as handle:
        return list(Scanner(**kwargs).scan(handle))


@pytest.mark.parametrize("scan", [scan_file, scan_lines], ids=["bulk", "lines"])
def test_fallen_off_the_bus_in_three_lines(scan):
    (finding,) = scan("nvsentinel-155.dmesg")
    assert (finding.line, finding.kind, finding.pci, finding.action, finding.bucket) == (
        5,
        "nvrm",
        "0000:b3:00",
        "reboot",
        "RESTART_BM",
    )
    assert finding.timestamp is None  # a continuation line carries no time


@pytest.mark.parametrize("scan", [scan_file, scan_lines], ids=["bulk", "lines"])
def test_sxid_event_lines_fold_into_one_finding(scan):
    findings = scan("nvtrust-124.dmesg")
    assert [(f.line, f.code, f.action) for f in findings] == [(4, 22013, "none")]
    # Without dedup: one finding per SXid event (three events, on links 44, 45 and 46),
    # not one per line (issue 12: a report's follow-up lines join its finding).
    assert [f.line for f in scan("nvtrust-124.dmesg", dedup=False)] == [4, 7, 10]


def test_amdgpu_reset_sequence():
    findings = scan_file("rocm-6273.dmesg")
    assert [(f.line, f.rule, f.pci) for f in findings] == [
        (5, "amdgpu.ring-timeout", "0000:c5:00"),
        (9, "amdgpu.gpu-reset", "0000:c5:00"),
        (10, "amdgpu.mes-kiq-failed", "0000:c5:00"),
        (12, "amdgpu.mes-kiq-failed", None),
    ]


def test_api_mismatch_then_init_failure():
    findings = scan_file("bazzite-2668.dmesg")
    assert [(f.line, f.rule, f.action, f.pci) for f in findings] == [
        (3, "nvrm.api-mismatch", "reimage", None),
        # The missing GSP firmware file is the cause: reinstall (the init failure follows).
        (16, "nvrm.firmware-missing", "reimage", None),
        (17, "nvrm.rminit-failed", "reboot", "0000:07:00"),
    ]


def test_kmsg_records_line_by_line_and_followed():
    by_line = scan_lines("kmsg-records.txt")
    assert [(f.code, f.rule, f.pci) for f in by_line] == [
        (79, "xid.79", "0000:5a:00"),
        (None, "amdgpu.ring-timeout", None),
    ]
    assert by_line[0].timestamp == "3023.054882" and by_line[0].clock == "uptime"
    # Followed as records, the dictionary line DEVICE=+pci:... names the device.
    records = list(follow_kmsg(str(DATA / "kmsg-records.txt"), poll=0.01, stop=_StopAfterEOF()))
    followed = list(Scanner().scan(records))
    assert [(f.rule, f.pci) for f in followed] == [
        ("xid.79", "0000:5a:00"),
        ("amdgpu.ring-timeout", "0000:0a:00"),
    ]


class _StopAfterEOF:
    """A stop event that fires after the follower's first idle wait."""

    def __init__(self):
        self.calls = 0

    def is_set(self):
        self.calls += 1
        return self.calls > 40


XID79 = (
    "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
)
# Published driver-load lines (NVSentinel issue 155; ROCm rocm-install-on-linux issue 615 shows the amdgpu one's device line).
NVIDIA_LOAD = "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  Release Build  (dvs-builder@U22-I3-B10-02-5)"
AMD_LOAD = "[drm] amdgpu kernel modesetting enabled."
AMD_RESET = "amdgpu 0000:c5:00.0: amdgpu: GPU reset begin!"


def test_a_fault_after_each_reboot_is_reported_again():
    lines = [
        f"[   8.1] {NVIDIA_LOAD}",
        f"[ 100.0] {XID79}",
        f"[ 101.0] {XID79}",
        f"[   8.1] {NVIDIA_LOAD}",
        f"[ 100.0] {XID79}",
    ]
    assert [f.line for f in Scanner().scan(lines)] == [2, 5]
    assert [f.line for f in Scanner().scan_binary(io.BytesIO("\n".join(lines).encode()))] == [2, 5]
    # With a known boot id the driver load is just a line of this boot.
    assert [f.line for f in Scanner(boot_id="b1").scan(lines)] == [2]
    amd = [
        f"[ 9.0] {AMD_LOAD}",
        f"[ 50.0] {AMD_RESET}",
        f"[ 9.0] {AMD_LOAD}",
        f"[ 50.0] {AMD_RESET}",
    ]
    assert [f.line for f in Scanner().scan(amd)] == [2, 4]


def test_agent_restart_with_saved_state_does_not_retrigger():
    lines = [f"6,{i},{100_000_000 + i},-;{XID79.replace('3b', f'{i:02x}')}" for i in range(1, 6)]
    first = Scanner(boot_id="boot-a")
    assert len(list(first.scan(lines))) == 5
    state = first.dedup.to_state()
    again = Scanner(boot_id="boot-a", dedup=Dedup.from_state(state))
    assert list(again.scan(lines)) == []  # the ring buffer replayed
    new = [*lines, f"6,9,200000000,-;{XID79}"]
    assert [f.line for f in again.scan(new[-1:])] == [
        6
    ]  # a new fault still passes (line counting continues)
    other_boot = Scanner(boot_id="boot-b", dedup=Dedup.from_state(state))
    assert len(list(other_boot.scan(lines))) == 5


def test_boot_id_is_on_the_finding():
    (finding,) = Scanner(boot_id="65fe2add").feed(f"[1.0] {XID79}")
    assert finding.boot_id == "65fe2add"


def test_line_numbers_are_per_input_and_count_every_line():
    scanner = Scanner()
    text = "\n".join(["noise"] * 9 + [f"[1.0] {XID79}"]) + "\n"
    (finding,) = scanner.scan_binary(io.BytesIO(text.encode()))
    assert finding.line == 10 and scanner.lines_read == 10


NOISE = [
    "",
    "kernel: usb 1-1: new device",
    "Feb 14 05:03:41 gpu-1 systemd[1]: Started x.",
    "[ 5.0] EXT4-fs ok",
    "\tindented",
    "NVRM: GPU at PCI:0000:3b:00: GPU-b850f46d",
    "a" * 300,
    "amdgpu: Topology: Add CPU node",
]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(published_lines() + NOISE), min_size=1, max_size=60),
    st.integers(1, 4096),
    st.booleans(),
    st.booleans(),
)
def test_bulk_and_line_paths_agree(lines, chunk, trailing_newline, dedup):
    text = "\n".join(lines) + ("\n" if trailing_newline else "")
    by_line = list(Scanner(dedup=dedup).scan(text.split("\n")[: len(lines)]))
    bulk_scanner = Scanner(dedup=dedup)
    bulk = list(bulk_scanner.scan_binary(io.BytesIO(text.encode()), chunk_size=chunk))
    assert bulk == by_line
    parts = text.split("\n")
    assert bulk_scanner.lines_read == len(parts) - (1 if parts[-1] == "" else 0)
    for finding in bulk:
        assert_valid(finding)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=200), max_size=20))
def test_feed_never_raises(lines):
    scanner = Scanner()
    for line in lines:
        for finding in scanner.feed(line):
            assert_valid(finding)
        scanner.feed(line.encode("utf-8", "surrogatepass"))


def test_binary_garbage_is_survived():
    rng = random.Random(7)
    blob = (
        bytes(rng.randrange(256) for _ in range(200_000)) + b"\nNVRM: Xid (PCI:0000:3b:00): 79, x\n"
    )
    findings = list(Scanner().scan_binary(io.BytesIO(blob), chunk_size=4096))
    assert findings and findings[-1].code == 79


def test_scan_path_in_parallel_equals_in_process(tmp_path, monkeypatch):
    from fleetmedic.scan import prefilter

    lines = published_lines() * 40 + NOISE * 200
    random.Random(3).shuffle(lines)
    path = tmp_path / "big.log"
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(prefilter, "PARALLEL_MIN_BYTES", 1)
    serial = Scanner()
    parallel = Scanner()
    expected = list(serial.scan_path(str(path), jobs=1))
    assert list(parallel.scan_path(str(path), jobs=3)) == expected
    assert parallel.lines_read == serial.lines_read == len(lines)


def test_placing_a_finding_keeps_every_other_field():
    """``Finding.placed`` (the scanner's fast ``dataclasses.replace``) names every field:
    one added to Finding and left out there would be lost from every scanned finding."""
    values: dict[str, object] = {}
    for number, field in enumerate(dataclasses.fields(Finding)):
        values[field.name] = number if "int" in str(field.type) else f"value-{number}"
    values["time"] = 1.5
    original = Finding(**values)  # type: ignore[arg-type]
    place = {"line": 99, "pci": "0000:3b:00", "timestamp": "t", "time": 2.5, "clock": "wall"}
    place["boot_id"] = "boot"
    assert original.placed(**place) == dataclasses.replace(original, **place)  # type: ignore[arg-type]
