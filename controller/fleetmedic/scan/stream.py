"""Follow a live kernel log: ``/dev/kmsg``, a file (``tail -F``) or ``journalctl -k -f``.

Each follower is a generator of lines (``str``) that runs until its
``stop`` event is set (or forever), so the agent writes::

    for finding in Scanner(boot_id=boot).scan(follow_kmsg(stop=stop)):
        ...

They wake up at least every ``poll`` seconds to check ``stop``; while
waiting they yield nothing. :func:`follow` picks one from a source spec.

- :func:`follow_kmsg` reads whole records (one ``read()`` per record) and
  yields each with its ``KEY=value`` dictionary lines attached, so the
  scanner can read ``DEVICE=+pci:...``. Records lost because the ring buffer
  wrapped (``EPIPE``) are skipped. ``from_start=False`` seeks to the end
  first (``SEEK_END``), so only new records arrive. :func:`read_kmsg` reads
  the same way but returns once nothing more is buffered (one-shot checks).
- :func:`follow_file` behaves like ``tail -F``: it survives rotation (a new
  inode at the path) and truncation, and yields only complete lines. It wakes
  on the write (inotify on the file's directory, :class:`FileWaker`), not on a
  timer; ``poll`` only bounds each wait (for ``stop``, and for file systems
  that send no inotify events, e.g. a file changed on another NFS client).
- :func:`follow_journal` runs ``journalctl -k -f -o json`` (current boot unless told
  otherwise; ``-u UNIT`` instead of ``-k`` for a service such as Fabric Manager) and
  yields each record as a syslog-style line that keeps the record's priority
  (:func:`journal_line`: ``<3>2024-02-14T05:03:41.123456+0000 host kernel: ...``), so the
  scanner knows an ``err``-level line from an ``info`` one, as it does from /dev/kmsg; the
  process is stopped when the generator is closed.
"""

from __future__ import annotations

import errno
import json
import os
import select
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from fleetmedic.errors import PermanentError, TemporaryError

KMSG = "/dev/kmsg"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
KMSG_RECORD_MAX = 8192
"""A /dev/kmsg read buffer must hold a whole record or read() fails (EINVAL)."""

POLL = 0.5
"""Seconds between checks of ``stop`` while a source is idle."""


def current_boot_id(path: str = BOOT_ID) -> str | None:
    """This boot's id (a UUID the kernel picks at boot), or ``None`` if unreadable.

    Pass it to :class:`~fleetmedic.scan.scanner.Scanner` so findings and
    dedup state belong to the boot; a reboot changes it.
    """
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def _stopped(stop: threading.Event | None) -> bool:
    return stop is not None and stop.is_set()


def _read_chunk(fd: int) -> bytes | None:
    """One ``read()``: a whole record from /dev/kmsg (a chunk of a plain file or FIFO),
    ``b""`` at the end of a file, ``None`` while nothing is buffered (EAGAIN)."""
    while True:
        try:
            return os.read(fd, KMSG_RECORD_MAX)
        except BlockingIOError:
            return None
        except OSError as exc:
            if exc.errno != errno.EPIPE:  # EPIPE: records overwritten before we read them
                raise


class _Records:
    """Joins kmsg lines into records: a line that starts with a space (``KEY=value``)
    belongs to the record before it."""

    def __init__(self) -> None:
        self._pending = ""
        self._partial = b""  # a line cut by the read size (plain files only)

    def add(self, chunk: bytes) -> Iterator[str]:
        data = self._partial + chunk
        cut = data.rfind(b"\n") + 1
        self._partial = data[cut:]
        for line in data[:cut].decode("utf-8", "replace").splitlines():
            if line.startswith(" ") and self._pending:
                self._pending += "\n" + line
                continue
            if self._pending:
                yield self._pending
            self._pending = line

    def flush(self) -> Iterator[str]:
        """Nothing more to read now: the last record is whole."""
        if self._partial:
            yield from self.add(b"\n")
        if self._pending:
            yield self._pending
            self._pending = ""


def read_kmsg(path: str = KMSG) -> Iterator[str]:
    """Yield the records ``path`` holds now, as :func:`follow_kmsg` does, then stop.

    Never waits for more. Raises ``OSError`` if ``path`` cannot be opened or read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    records = _Records()
    try:
        while chunk := _read_chunk(fd):
            yield from records.add(chunk)
        yield from records.flush()
    finally:
        os.close(fd)


def follow_kmsg(
    path: str = KMSG,
    *,
    from_start: bool = True,
    stop: threading.Event | None = None,
    poll: float = POLL,
    idle: Callable[[], None] | None = None,
) -> Iterator[str]:
    """Yield ``/dev/kmsg`` records (``"6,1234,5678,-;msg\\n SUBSYSTEM=...``) as they come.

    Raises :class:`PermanentError` if ``path`` cannot be opened (one line).
    Also works on a FIFO or a plain file of records (tests): a line that
    starts with a space is part of the record before it.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise PermanentError(f"cannot open {path}: {exc.strerror}") from None
    records = _Records()
    try:
        if not from_start:
            try:
                os.lseek(fd, 0, os.SEEK_END)
            except OSError:
                pass
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while not _stopped(stop):
            try:
                chunk = _read_chunk(fd)
            except OSError as exc:
                raise TemporaryError(f"reading {path} failed: {exc.strerror}", delay=poll) from None
            if chunk:
                yield from records.add(chunk)
                continue
            yield from records.flush()
            if idle is not None:
                idle()
            if chunk is None:
                poller.poll(int(poll * 1000))
            else:  # a plain file or FIFO at EOF
                time.sleep(poll)
        yield from records.flush()
    finally:
        os.close(fd)


class FileWaker:
    """Sleep until ``path`` may have changed, or at most a timeout: an inotify watch on
    its directory (writes, creation, rotation, truncation, deletion of that name).

    Set up *before* the file is read, so a line written between a read that found
    nothing and the wait still wakes it (the event waits in the inotify queue). Where
    inotify is unavailable (no watches left, ``ENOSYS``) it sleeps the timeout, as a
    plain poll would.
    """

    MASK = 0

    def __init__(self, path: str) -> None:
        self.name = os.path.basename(path)
        self.dir = os.path.dirname(path) or "."
        self._ino = None
        self._watching = False
        try:
            from inotify_simple import INotify, flags

            FileWaker.MASK = (
                flags.MODIFY
                | flags.CLOSE_WRITE
                | flags.ATTRIB
                | flags.CREATE
                | flags.MOVED_TO
                | flags.MOVED_FROM
                | flags.DELETE
                | flags.DELETE_SELF
                | flags.MOVE_SELF
            )
            self._ino = INotify()
        except OSError:
            self._ino = None
        self._watch()

    def _watch(self) -> None:
        if self._ino is None or self._watching:
            return
        try:
            self._ino.add_watch(self.dir, FileWaker.MASK)
            self._watching = True
        except OSError:  # the directory does not exist (yet), or no watches are left
            pass

    @property
    def event_driven(self) -> bool:
        return self._watching

    def wait(self, timeout: float) -> None:
        """Return when the file may have changed, or after ``timeout`` seconds."""
        self._watch()
        if not self._watching:
            time.sleep(timeout)
            return
        assert self._ino is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            events = self._ino.read(timeout=max(1, int(left * 1000)))
            if any(not e.name or e.name == self.name for e in events):
                return  # our file, or the directory itself (moved, deleted)
            if any(e.mask & 0x4000 for e in events):  # IN_Q_OVERFLOW: events were lost
                return

    def close(self) -> None:
        if self._ino is not None:
            self._ino.close()
            self._ino = None
            self._watching = False


def follow_file(
    path: str,
    *,
    from_start: bool = True,
    stop: threading.Event | None = None,
    poll: float = POLL,
    idle: Callable[[], None] | None = None,
) -> Iterator[str]:
    """Yield complete lines appended to ``path``, across rotation and truncation.

    A missing file is waited for. ``from_start=False`` starts at the current end.
    Wakes on the write (:class:`FileWaker`); ``poll`` is the longest wait. ``idle`` is
    called each time it has read all there is, before it waits (a reader that holds a
    multi-line record ends it when the log stays quiet: :meth:`Scanner.expire`).
    """
    handle = None
    inode = None
    partial = b""
    first = True
    waker = FileWaker(path)
    try:
        while not _stopped(stop):
            if handle is None:
                try:
                    handle = open(path, "rb")
                    stat = os.fstat(handle.fileno())
                    inode = (stat.st_dev, stat.st_ino)
                    if first and not from_start:
                        handle.seek(0, os.SEEK_END)
                    first = False
                except OSError:
                    handle = None
                    first = False  # it appears later: all of it is new
                    waker.wait(poll)
                    continue
            data = handle.read(1 << 20)
            if data:
                lines = (partial + data).split(b"\n")
                partial = lines.pop()
                for line in lines:
                    yield line.rstrip(b"\r").decode("utf-8", "replace")
                continue
            try:
                current: os.stat_result | None = os.stat(path)
            except OSError:
                current = None
            if current is None or (current.st_dev, current.st_ino) != inode:
                handle.close()  # rotated away: read the new file from its start
                handle = None
                partial = b""
                continue
            if current.st_size < handle.tell():  # truncated in place
                handle.seek(0)
                partial = b""
                continue
            if idle is not None:
                idle()
            waker.wait(poll)
    finally:
        waker.close()
        if handle is not None:
            handle.close()


def journal_line(record: object) -> str | None:
    """One ``journalctl -o json`` record as a line the parser reads, priority kept:
    ``<PRIORITY>ISO-time host identifier: MESSAGE``. ``None`` for a record without a
    message. A message with newlines (one record the kernel logged in parts) stays one
    line."""
    if not isinstance(record, dict):
        return None
    msg = record.get("MESSAGE")
    if isinstance(msg, list):  # not valid UTF-8: journalctl gives the bytes
        msg = bytes(b & 0xFF for b in msg if isinstance(b, int)).decode("utf-8", "replace")
    if not isinstance(msg, str):
        return None
    text = " ".join(msg.splitlines())
    host = str(record.get("_HOSTNAME") or "localhost")
    ident = str(
        record.get("SYSLOG_IDENTIFIER")
        or ("kernel" if record.get("_TRANSPORT") == "kernel" else "journal")
    )
    try:
        usec = int(str(record.get("__REALTIME_TIMESTAMP")))
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(usec // 1_000_000))
        stamp += f".{usec % 1_000_000:06d}+0000 "
    except ValueError:
        stamp = ""
    pri = str(record.get("PRIORITY", ""))
    prefix = f"<{pri}>" if pri.isdigit() else ""
    return f"{prefix}{stamp}{host} {ident}: {text}"


def follow_journal(
    *,
    args: Sequence[str] = ("-b",),
    stop: threading.Event | None = None,
    poll: float = POLL,
    journalctl: str = "journalctl",
    select_: Sequence[str] = ("-k",),
    idle: Callable[[], None] | None = None,
) -> Iterator[str]:
    """Yield the records of ``journalctl <select_> -f -o json <args>`` as lines
    (:func:`journal_line`).

    ``select_`` defaults to ``-k`` (the kernel's messages); ``("-u", UNIT)`` follows a
    service. ``args`` defaults to ``-b`` (this boot from its start); pass ``("-n", "0")``
    for new lines only. ``idle`` is called after each ``poll`` seconds without a record.
    Raises :class:`PermanentError` if journalctl cannot be started.
    """
    command = [journalctl, *select_, "-f", "-o", "json", "--no-pager", *args]
    try:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except OSError as exc:
        raise PermanentError(f"cannot run {journalctl}: {exc.strerror}") from None
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    partial = b""
    try:
        while not _stopped(stop):
            ready, _, _ = select.select([fd], [], [], poll)
            if not ready:
                if idle is not None:
                    idle()
                continue
            data = os.read(fd, 65536)
            if not data:
                break  # journalctl exited
            data = partial + data
            lines = data.split(b"\n")
            partial = lines.pop()
            for line in lines:
                try:
                    converted = journal_line(json.loads(line))
                except ValueError:
                    continue  # not a record (journalctl's own notice)
                if converted is not None:
                    yield converted
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def follow(
    source: str,
    *,
    from_start: bool = True,
    stop: threading.Event | None = None,
    poll: float = POLL,
    idle: Callable[[], None] | None = None,
) -> Iterator[str]:
    """Follow ``source``: ``"kmsg"`` (or a char device path), ``"journal"``, or a file path.
    ``idle`` is called whenever there is nothing to read (see :func:`follow_file`)."""
    if source in ("kmsg", KMSG):
        return follow_kmsg(KMSG, from_start=from_start, stop=stop, poll=poll, idle=idle)
    if source == "journal":
        since = ("-b",) if from_start else ("-n", "0")
        return follow_journal(args=since, stop=stop, poll=poll, idle=idle)
    try:
        if os.path.exists(source) and not os.path.isfile(source) and not os.path.isdir(source):
            return follow_kmsg(source, from_start=from_start, stop=stop, poll=poll, idle=idle)
    except OSError:
        pass
    return follow_file(source, from_start=from_start, stop=stop, poll=poll, idle=idle)
