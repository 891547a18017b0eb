"""The log-prefix parser: one parametrised case per format, and it never raises."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scan_helpers import published_lines

from fleetmedic.scan import parser

MSG = "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."

# (format, line, timestamp, clock, message); the messages are published ones
# (see data/published_lines.yaml), the framings are the formats' own.
FORMATS = [
    ("dmesg", f"[ 1843.308145] {MSG}", "1843.308145", "uptime", MSG),
    ("dmesg, large uptime", f"[1231741.378609] {MSG}", "1231741.378609", "uptime", MSG),
    ("dmesg -T", f"[Fri Aug 30 11:43:09 2024] {MSG}", "Fri Aug 30 11:43:09 2024", "wall", MSG),
    (
        "dmesg -T, one-digit day",
        f"[Sat Jan  7 14:25:56 2023] {MSG}",
        "Sat Jan  7 14:25:56 2023",
        "wall",
        MSG,
    ),
    (
        "dmesg iso",
        f"2025-01-25T10:34:54,859532+00:00 {MSG}",
        "2025-01-25T10:34:54,859532+00:00",
        "wall",
        MSG,
    ),
    ("dmesg -x", f"kern  :err   : [ 1843.308145] {MSG}", "1843.308145", "uptime", MSG),
    (
        "dmesg -x iso",
        f"kern  :err   : 2025-01-25T10:34:54,859532+00:00 {MSG}",
        "2025-01-25T10:34:54,859532+00:00",
        "wall",
        MSG,
    ),
    (
        "journalctl short",
        f"Feb 14 05:03:41 000-000-00000-1-gpu-1 kernel: {MSG}",
        "Feb 14 05:03:41",
        "wall",
        MSG,
    ),
    ("journalctl --no-hostname", f"Mar 21 21:42:01 kernel: {MSG}", "Mar 21 21:42:01", "wall", MSG),
    (
        "journalctl short-precise",
        f"Feb 14 05:03:41.123456 gpu-1 kernel: {MSG}",
        "Feb 14 05:03:41.123456",
        "wall",
        MSG,
    ),
    (
        "journalctl short-iso",
        f"2026-02-14T05:03:41+0000 gpu-1 kernel: {MSG}",
        "2026-02-14T05:03:41+0000",
        "wall",
        MSG,
    ),
    (
        "journalctl short-iso-precise",
        f"2026-02-14T05:03:41.123456+0000 gpu-1 kernel: {MSG}",
        "2026-02-14T05:03:41.123456+0000",
        "wall",
        MSG,
    ),
    ("syslog", f"Jun 30 11:07:05 gpu-0 kernel: {MSG}", "Jun 30 11:07:05", "wall", MSG),
    (
        "syslog, padded day, kernel time",
        f"Dec  2 11:49:53 worker4 kernel: [  885.242168] {MSG}",
        "Dec  2 11:49:53",
        "wall",
        MSG,
    ),
    (
        "syslog with priority",
        f"<3>Feb 14 05:03:41 host kernel: {MSG}",
        "Feb 14 05:03:41",
        "wall",
        MSG,
    ),
    (
        "RFC 5424-ish",
        f"2024-02-14T05:03:41.123456+00:00 host kernel: {MSG}",
        "2024-02-14T05:03:41.123456+00:00",
        "wall",
        MSG,
    ),
    (
        "kubectl --timestamps",
        "2024-02-14T05:03:44.123456789Z RuntimeError: CUDA error: uncorrectable ECC error encountered",
        "2024-02-14T05:03:44.123456789Z",
        "wall",
        "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    ),
    ("/dev/kmsg", f"3,4471,3023054882,-;{MSG}", "3023.054882", "uptime", MSG),
    ("/dev/kmsg extra fields", f"4,1227,123456789,c,caller=T42;{MSG}", "123.456789", "uptime", MSG),
    (
        "/dev/kmsg with dictionary",
        f"3,4471,3023054882,-;{MSG}\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0",
        "3023.054882",
        "uptime",
        MSG,
    ),
    (
        "dmesg continuation line",
        "               NVRM: (PCI ID: 10de:26b5) installed in this system has",
        None,
        None,
        "NVRM: (PCI ID: 10de:26b5) installed in this system has",
    ),
    ("bare message", MSG, None, None, MSG),
    ("CRLF", f"[ 1.5] {MSG}\r\n", "1.5", "uptime", MSG),
]


@pytest.mark.parametrize("fmt,line,timestamp,clock,message", FORMATS, ids=[f[0] for f in FORMATS])
def test_format(fmt, line, timestamp, clock, message):
    record = parser.parse(line)
    assert record.message == message
    assert record.timestamp == timestamp
    assert record.clock == clock
    assert (record.time is None) == (clock is None)


def test_dmesg_iso_keeps_device_prefixed_messages():
    # "host tag:" must not be stripped from dmesg's own "name: text" messages.
    for message in (
        "nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Data {0x1}",
        "amdgpu 0000:c5:00.0: amdgpu: GPU reset begin!",
        "NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)",
    ):
        assert parser.parse(f"2025-01-25T10:34:54,859532+00:00 {message}").message == message


def test_kmsg_escapes_are_unescaped():
    record = parser.parse(r"6,1,2,-;NVRM: The NVIDIA GPU 0000:b3:00.0\x0aNVRM: fallen off the bus")
    assert record.message == "NVRM: The NVIDIA GPU 0000:b3:00.0 NVRM: fallen off the bus"
    assert record.kmsg and record.seq == 1


def test_uptime_and_wall_clock_values():
    assert parser.parse("[ 1843.308145] x").time == pytest.approx(1843.308145)
    assert parser.parse("2024-02-14T05:03:41+0000 h kernel: x").time == 1707887021.0
    assert parser.parse("2024-02-14T05:03:41Z x").time == 1707887021.0
    assert parser.parse("3,1,2500000,-;x").time == pytest.approx(2.5)


def test_impossible_timestamps_do_not_raise():
    assert parser.parse("2024-02-30T05:03:41+0000 h kernel: x").time is None
    assert parser.parse("[Fri Feb 30 11:43:09 2024] x").time is None


@settings(max_examples=400, deadline=None)
@given(st.text())
def test_parser_never_raises_on_text(line):
    record = parser.parse(line)
    assert isinstance(record.message, str)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(published_lines() + [f[1] for f in FORMATS]),
    st.integers(0, 400),
    st.text(max_size=20),
)
def test_parser_never_raises_on_damaged_lines(line, cut, junk):
    for damaged in (
        line[:cut],
        junk + line,
        line[:cut] + junk + line[cut:],
        line.replace(" ", junk, 1),
    ):
        assert isinstance(parser.parse(damaged).message, str)


def test_talos_dmesg_gives_time_and_level():
    # talosctl dmesg, as published in NVIDIA/open-gpu-kernel-modules issue 446 and
    # siderolabs/pkgs issue 792.
    r = parser.parse(
        "192.168.11.119: kern: warning: [2026-04-22T21:27:51.291660856Z]: NVRM: Xid (PCI:0000:0b:00): 154"
    )
    assert (r.message, r.timestamp, r.clock, r.level) == (
        "NVRM: Xid (PCI:0000:0b:00): 154",
        "2026-04-22T21:27:51.291660856Z",
        "wall",
        4,
    )
    r = parser.parse(
        "k3s-node3.lab: kern:    info: [2023-08-22T01:37:23.894402442Z]: amdgpu 0000:04:00.0: x"
    )
    assert (r.message, r.level) == ("amdgpu 0000:04:00.0: x", 6)
    assert parser.parse("kern:     err: [2023-08-22T01:37:23.8Z]: amdgpu x").level == 3
