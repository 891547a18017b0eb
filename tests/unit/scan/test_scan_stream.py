"""Followers: a growing file (append, truncation, rotation), kmsg-style records, journalctl."""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from fleetmedic.errors import PermanentError
from fleetmedic.scan import Scanner, follow, follow_file, follow_journal, follow_kmsg, read_kmsg
from fleetmedic.scan.stream import KMSG_RECORD_MAX

XID = "[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."


def collect(iterator, want, timeout=10.0):
    """Read from a follower in a thread until `want` items or the timeout."""
    got: list[str] = []

    def run():
        for item in iterator:
            got.append(item)
            if len(got) >= want:
                return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, got


def wait_for(got, n, timeout=10.0):
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        time.sleep(0.02)
    return got


def test_follow_file_appends_truncation_and_rotation(tmp_path: Path):
    path = tmp_path / "kern.log"
    path.write_text("first\n")
    stop = threading.Event()
    thread, got = collect(follow_file(str(path), stop=stop, poll=0.02), want=5)
    wait_for(got, 1)
    with open(path, "a") as handle:
        handle.write("second\nthi")
        handle.flush()
        time.sleep(0.1)
        handle.write("rd\n")
    wait_for(got, 3)
    path.write_text("after truncation\n")  # truncated in place
    wait_for(got, 4)
    path.rename(tmp_path / "kern.log.1")  # rotated away
    path.write_text("new file\n")
    wait_for(got, 5)
    stop.set()
    thread.join(5)
    assert got == ["first", "second", "third", "after truncation", "new file"]


def test_follow_file_wakes_on_the_write_not_the_timer(tmp_path: Path):
    """With a 120 s poll, appends, a truncation and a rotation still arrive at once: the
    follower waits on inotify events for the file, not on its timer. (The bounds below are
    far under the poll, so they tell an event from the timer even on a machine whose CPUs
    a parallel suite keeps busy; 1 s was flaky there.)"""
    path = tmp_path / "kern.log"
    path.write_text("first\n")
    thread, got = collect(follow_file(str(path), poll=120), want=4)
    wait_for(got, 1)
    time.sleep(0.05)  # the follower is waiting now
    t0 = time.monotonic()
    with open(path, "a") as handle:
        handle.write("second\n")
    wait_for(got, 2)
    first = time.monotonic() - t0
    path.write_text("truncated\n")  # shorter than what was read: a truncation
    wait_for(got, 3)
    path.rename(tmp_path / "kern.log.1")
    path.write_text("new file\n")
    wait_for(got, 4)
    thread.join(5)
    assert got == ["first", "second", "truncated", "new file"]
    assert first < 10.0 and time.monotonic() - t0 < 30.0


def test_file_waker_falls_back_to_the_timeout(tmp_path: Path):
    """No directory to watch (yet): it sleeps the timeout, as a poll would."""
    from fleetmedic.scan.stream import FileWaker

    waker = FileWaker(str(tmp_path / "missing" / "kern.log"))
    assert not waker.event_driven
    t0 = time.monotonic()
    waker.wait(0.05)
    assert 0.04 < time.monotonic() - t0 < 1.0
    (tmp_path / "missing").mkdir()
    waker.wait(0.01)  # the directory exists now: watched from here on
    assert waker.event_driven
    waker.close()


def test_follow_file_from_end_and_missing_file(tmp_path: Path):
    path = tmp_path / "later.log"
    stop = threading.Event()
    thread, got = collect(follow_file(str(path), stop=stop, poll=0.02, from_start=False), want=1)
    time.sleep(0.1)
    path.write_text("appears\n")
    wait_for(got, 1)
    stop.set()
    thread.join(5)
    assert got == ["appears"]


def test_scanner_over_a_followed_file(tmp_path: Path):
    path = tmp_path / "kern.log"
    path.write_text("noise\n")
    stop = threading.Event()
    scanner = Scanner(boot_id="b")
    thread, got = collect(scanner.scan(follow_file(str(path), stop=stop, poll=0.02)), want=1)
    with open(path, "a") as handle:
        handle.write(XID + "\n")
    wait_for(got, 1)
    stop.set()
    thread.join(5)
    assert [(f.line, f.code) for f in got] == [(2, 79)]


def test_follow_kmsg_groups_dictionary_lines(tmp_path: Path):
    path = tmp_path / "kmsg"
    path.write_text("6,1,10,-;first\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n6,2,20,-;second\n")
    stop = threading.Event()
    thread, got = collect(follow_kmsg(str(path), stop=stop, poll=0.02), want=2)
    wait_for(got, 2)
    stop.set()
    thread.join(5)
    assert got == ["6,1,10,-;first\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0", "6,2,20,-;second"]


def test_follow_kmsg_unopenable_is_a_one_line_error(tmp_path: Path):
    with pytest.raises(PermanentError) as err:
        next(follow_kmsg(str(tmp_path / "missing")))
    assert "\n" not in str(err.value)


def test_follow_real_dev_kmsg_when_readable():
    if not os.access("/dev/kmsg", os.R_OK):
        pytest.skip("/dev/kmsg is not readable here")
    stop = threading.Event()
    thread, got = collect(follow_kmsg(stop=stop, poll=0.05), want=1)
    wait_for(got, 1)
    stop.set()
    thread.join(5)
    assert got and got[0].split(";", 1)[0].count(",") >= 3


RECORDS = "6,1,10,-;first\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n6,2,20,-;second\n6,3,30,-;last\n SUBSYSTEM=pci\n"
GROUPED = [
    "6,1,10,-;first\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0",
    "6,2,20,-;second",
    "6,3,30,-;last\n SUBSYSTEM=pci",
]


def test_read_kmsg_groups_records_from_the_first_to_the_last_and_returns(tmp_path: Path):
    path = tmp_path / "kmsg"
    path.write_text(RECORDS)
    assert list(read_kmsg(str(path))) == GROUPED


def test_read_kmsg_returns_when_nothing_more_is_buffered(tmp_path: Path):
    """A FIFO whose writer stays open stands in for /dev/kmsg: the end is EAGAIN, not EOF."""
    path = tmp_path / "kmsg"
    os.mkfifo(path)
    holder = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # lets the writer open without blocking
    writer = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    try:
        for record in RECORDS.splitlines(keepends=True):
            os.write(writer, record.encode())
        t0 = time.monotonic()
        assert list(read_kmsg(str(path))) == GROUPED
        assert list(read_kmsg(str(path))) == []
        assert time.monotonic() - t0 < 1
    finally:
        os.close(writer)
        os.close(holder)


def test_kmsg_records_longer_than_a_read_stay_whole(tmp_path: Path):
    """A plain file is read in KMSG_RECORD_MAX chunks; a line cut by one is joined again."""
    path = tmp_path / "kmsg"
    records = [f"6,{i},{i},-;message {i} {'x' * 700}" for i in range(40)]
    path.write_text("\n".join(records) + "\n")
    assert path.stat().st_size > 3 * KMSG_RECORD_MAX
    assert list(read_kmsg(str(path))) == records


def read_with_one_epipe(monkeypatch, after: int):
    """os.read fails with EPIPE once, after ``after`` reads: /dev/kmsg's answer when the
    ring buffer overwrote the next record before we read it (a pipe cannot do that)."""
    real_read, calls = os.read, []

    def read(fd, size):
        calls.append(size)
        if len(calls) == after + 1:
            raise OSError(errno.EPIPE, os.strerror(errno.EPIPE))
        return real_read(fd, size)

    monkeypatch.setattr(os, "read", read)
    return calls


def test_read_kmsg_skips_overwritten_records(tmp_path: Path, monkeypatch):
    path = tmp_path / "kmsg"
    path.write_text(RECORDS)
    read_with_one_epipe(monkeypatch, after=0)
    assert list(read_kmsg(str(path))) == GROUPED


def test_follow_kmsg_skips_overwritten_records(tmp_path: Path, monkeypatch):
    path = tmp_path / "kmsg"
    path.write_text(RECORDS)
    read_with_one_epipe(monkeypatch, after=0)
    stop = threading.Event()
    thread, got = collect(follow_kmsg(str(path), stop=stop, poll=0.02), want=3)
    wait_for(got, 3)
    stop.set()
    thread.join(5)
    assert got == GROUPED


def test_read_kmsg_unreadable_raises_oserror(tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        next(read_kmsg(str(tmp_path / "missing")))


def test_read_real_dev_kmsg_without_waiting():
    if not os.access("/dev/kmsg", os.R_OK):
        pytest.skip("/dev/kmsg is not readable here")
    t0 = time.monotonic()
    records = list(read_kmsg())
    assert time.monotonic() - t0 < 5
    assert records and all(r.split(";", 1)[0].count(",") >= 3 for r in records)


def test_follow_journal_runs_journalctl_and_stops_it(tmp_path: Path):
    fake = tmp_path / "journalctl"
    log = tmp_path / "args"
    # A stand-in that records its arguments and writes two JSON records, then blocks like -f does.
    fake.write_text(
        f'#!/bin/sh\necho "$@" > {log}\n'
        """echo '{"PRIORITY":"3","MESSAGE":"NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.","__REALTIME_TIMESTAMP":"1771045421000001","_HOSTNAME":"gpu-1","SYSLOG_IDENTIFIER":"kernel"}'\n"""
        """echo '{"PRIORITY":"6","MESSAGE":"usb 1-1: new device","__REALTIME_TIMESTAMP":"1771045422000001","_HOSTNAME":"gpu-1","SYSLOG_IDENTIFIER":"kernel"}'\n"""
        "exec sleep 60\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    stop = threading.Event()
    scanner = Scanner()
    thread, got = collect(
        scanner.scan(follow_journal(journalctl=str(fake), stop=stop, poll=0.05)), want=1
    )
    wait_for(got, 1)
    stop.set()
    thread.join(10)
    assert not thread.is_alive()
    assert [(f.code, f.pci, f.clock) for f in got] == [(79, "0000:44:00", "wall")]
    assert log.read_text().split()[:4] == ["-k", "-f", "-o", "json"]


def test_follow_journal_missing_binary(tmp_path: Path):
    with pytest.raises(PermanentError):
        next(follow_journal(journalctl=str(tmp_path / "nope")))


def test_follow_picks_by_source(tmp_path: Path):
    path = tmp_path / "f.log"
    path.write_text("x\n")
    assert follow(str(path)).__name__ == "follow_file"
    assert follow("kmsg").__name__ == "follow_kmsg"
    assert follow("journal").__name__ == "follow_journal"


def test_current_boot_id(tmp_path: Path):
    from fleetmedic.scan import current_boot_id

    fake = tmp_path / "boot_id"
    fake.write_text("65fe2add-e54b-4825-b2ef-fbe3994b2059\n")
    assert current_boot_id(str(fake)) == "65fe2add-e54b-4825-b2ef-fbe3994b2059"
    assert current_boot_id(str(tmp_path / "missing")) is None


@pytest.mark.parametrize("source", ["journal", "file"])
def test_followers_call_idle_when_there_is_nothing_to_read(tmp_path: Path, source: str):
    """A reader holding a multi-line record ends it when the log stays quiet (issue 39:
    the agent's Fabric Manager watch calls Scanner.expire from here)."""
    fake = tmp_path / "journalctl"
    fake.write_text("#!/bin/sh\nexec sleep 60\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "fabricmanager.log"
    log.write_text("one\n")
    stop = threading.Event()
    quiet: list[float] = []

    def idle() -> None:
        quiet.append(time.monotonic())

    if source == "journal":
        lines = follow_journal(journalctl=str(fake), stop=stop, poll=0.05, idle=idle)
    else:
        lines = follow_file(str(log), stop=stop, poll=0.05, idle=idle)
    thread, got = collect(lines, want=2)
    wait_for(quiet, 2)
    stop.set()
    thread.join(10)
    assert not thread.is_alive() and len(quiet) >= 2
    assert got == (["one"] if source == "file" else [])
