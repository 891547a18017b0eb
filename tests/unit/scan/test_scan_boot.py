"""Where the current boot starts in a kernel log file: its last ``Linux version`` banner."""

from __future__ import annotations

from pathlib import Path
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetmedic.scan import boot, is_banner, last_boot_offset

BANNER = (
    "[    0.000000] Linux version 6.1.0-18-amd64 (gcc-12) #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1\n"
)
SYSLOG_BANNER = (
    "Nov 21 10:00:00 gpu-7 kernel: [    0.000000] Linux version 6.1.0-26-amd64 "
    "(debian-kernel@lists.debian.org) #1 SMP PREEMPT_DYNAMIC\n"
)
XID = "[  300.123456] NVRM: Xid (PCI:0000:3b:00): 79, pid=2417, name=python3, GPU has fallen off the bus.\n"
MENTION = "[   12.000000] mydriver: built for Linux version 5.10, running anyway\n"


def offset(tmp_path: Path, text: str) -> int | None:
    path = tmp_path / "kern.log"
    path.write_text(text)
    with open(path, "rb") as handle:
        return last_boot_offset(handle)


def test_two_boots_give_the_second_banner(tmp_path):
    first = BANNER + XID
    assert offset(tmp_path, first + BANNER + XID) == len(first)


def test_no_banner_is_none(tmp_path):
    assert offset(tmp_path, XID + XID) is None


def test_empty_file_is_none(tmp_path):
    assert offset(tmp_path, "") is None


def test_banner_at_offset_0_is_0_not_none(tmp_path):
    assert offset(tmp_path, BANNER + XID) == 0


def test_banner_in_the_last_bytes(tmp_path):
    before = BANNER + XID + XID
    assert offset(tmp_path, before + SYSLOG_BANNER) == len(before)


def test_a_last_line_without_its_newline_is_not_written_yet(tmp_path):
    before = BANNER + XID
    assert offset(tmp_path, before + BANNER.rstrip("\n")) == 0
    assert offset(tmp_path, XID + BANNER.rstrip("\n")) is None


def test_a_message_that_mentions_the_banner_is_not_a_boot(tmp_path):
    before = XID + SYSLOG_BANNER
    assert offset(tmp_path, before + XID + MENTION + XID) == len(XID)
    assert offset(tmp_path, MENTION) is None


def test_a_device_without_content_has_no_banner():
    with open("/dev/null", "rb") as handle:
        assert last_boot_offset(handle) is None


def banners(text: bytes) -> list[tuple[int, int]]:
    """(offset, length) of every whole line that is a banner, reading forwards."""
    found, at = [], 0
    for line in text.splitlines(keepends=True):
        if line.endswith(b"\n") and is_banner(line.decode("utf-8", "replace")):
            found.append((at, len(line)))
        at += len(line)
    return found


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                BANNER,
                SYSLOG_BANNER,
                XID,
                MENTION,
                "x" * 40 + "\n",
                "\n",
                "Linux version ",
                "partial",
            ]
        ),
        max_size=12,
    ),
    st.integers(1, 64),
    st.integers(8, 128),
)
def test_reading_backwards_in_blocks_finds_what_reading_forwards_finds(
    tmp_path_factory, parts, block, max_line
):
    """Banners and lines cut at every block edge (tiny blocks), unfinished last lines and
    over-long lines: the backwards search agrees with reading the file forwards."""
    text = "".join(parts).encode()
    path = tmp_path_factory.mktemp("boot") / "kern.log"
    path.write_bytes(text)
    with (
        patch.object(boot, "BLOCK", block),
        patch.object(boot, "MAX_LINE", max_line),
        open(path, "rb") as handle,
    ):
        got = last_boot_offset(handle)
    found = banners(text)
    # the last banner; only banner lines longer than MAX_LINE may be skipped (by design)
    allowed = {
        off
        for i, (off, _) in enumerate(found)
        if all(length > max_line for _, length in found[i + 1 :])
    }
    if all(length > max_line for _, length in found):
        allowed.add(None)
    assert got in allowed, (text, block, max_line, got, found)
    if all(length <= max_line for _, length in found):
        assert got == (found[-1][0] if found else None)


@pytest.mark.parametrize(
    "line, expected",
    [
        (BANNER, True),
        (SYSLOG_BANNER, True),
        ("2026-02-14T05:03:41.000001+0000 gpu-1 kernel: Linux version 6.1.0\n", True),
        ("6,1,0,-;Linux version 6.1.0 (gcc-12)\n", True),
        ("Linux version 6.1.0-fleetmedic-test\n", True),
        (MENTION, False),
        (XID, False),
    ],
)
def test_is_banner(line, expected):
    assert is_banner(line) is expected
