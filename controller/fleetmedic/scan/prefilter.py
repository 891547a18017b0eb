"""Find candidate lines in a large byte stream without looking at every line.

A GPU node's kernel log is mostly other things; only lines containing one of
a few literals (``NVRM``, ``nvidia-nvswitch``, ``amdgpu``, ...) can be GPU
faults. :func:`candidates` reads the stream in large chunks and lets C code
find the literals in the whole chunk (:mod:`fleetmedic.scan.literals`:
Hyperscan in one pass where it is installed, else the ``re`` module in one
pass per distinct first byte of the search keys). Only the lines around the
hits are cut out. Line numbers come from one newline-count pass per chunk
(the finder's ``count_lines``: StringZilla's SIMD count where installed, else
``bytes.count``). Chunks are searched in place (no concatenation); a regular
file's chunks are windows of a read-only memory map where StringZilla counts the
lines (no copy at all: :func:`_mapped_windows`), a pipe's are read into one buffer.

What this costs is therefore reading the file, the literal search and the
line count; see ``bench/scan_throughput.py`` for the figures against grep.
:func:`candidates_parallel` splits a file into byte ranges and runs the
passes in worker processes.
"""

from __future__ import annotations

import io
import mmap
import os
import stat
from collections.abc import Callable, Generator, Iterator, Sequence
from itertools import pairwise
from typing import Any, BinaryIO

from fleetmedic.scan import literals as literals_mod

CHUNK_SIZE = 4 * 1024 * 1024
"""Bytes read per step: large enough that per-chunk overhead vanishes (a few
Python calls per chunk), small enough that the chunk the kernel just copied is
still in the CPU's cache when the literal search and the line count read it
(16 MB cost about 5 % more CPU per GB than 4 MB here), and far inside the
agent's memory limit."""

MAX_LINE = 1024 * 1024
"""A "line" longer than this is cut; the rest is read as the next line."""

FOLLOW_PAST_LIMIT = 64
"""With ``limit``, at most this many lines are read past it for ``follow`` (a chain of
asked-for lines: a Fabric Manager record's detail lines, each asking for the next; its
scanner reads at most 16 of them); the next range's worker reads on from its start."""

PARALLEL_MIN_BYTES = 256 * 1024 * 1024
"""Below this, worker start-up costs more than it saves."""


def candidates(
    stream: BinaryIO,
    triggers: Sequence[bytes],
    chunk_size: int = CHUNK_SIZE,
    limit: int | None = None,
    engine: str | None = None,
    follow: Sequence[bytes] = (),
    mapped: bool = False,
) -> Generator[tuple[int, bytes], None, int]:
    """Yield ``(line_number, line)`` for every line that contains a trigger.

    Line numbers are 1-based from the stream's current position; ``line``
    has no newline. ``limit`` stops after that many bytes (a byte range of a
    file). ``engine`` picks the literal search (:mod:`fleetmedic.scan.literals`;
    default: the fastest installed); every engine gives the same results. The
    generator's return value (``StopIteration.value``) is the number of lines read.

    ``follow``: a yielded line that contains one of these literals also brings the
    line after it, trigger or not (a record the log cut in two: its second half need
    not carry a driver literal, and searching for what such halves say would cost
    the literal search of every line). A line so brought that holds one of them
    brings the next in turn (a multi-line record's detail lines). With ``limit``, such
    lines may lie past the limit (at most :data:`FOLLOW_PAST_LIMIT`); they are read,
    yielded, and not counted in the return value.

    ``mapped``: a regular file is searched through a memory map (:func:`_mapped_windows`),
    for an operator's bulk scan (``fleetmedic scan``). Off by default, so the node's own
    checks never risk the SIGBUS of a file truncated under a window's search.
    """
    if not 0 < chunk_size <= literals_mod.MAX_SCAN:
        raise ValueError(f"chunk_size must be 1..{literals_mod.MAX_SCAN} bytes, not {chunk_size}")
    finder = literals_mod.finder(triggers, engine)
    count, exact = finder.count_lines, finder.exact
    literals = [t for t in dict.fromkeys(triggers) if t]
    follows = [t for t in dict.fromkeys(follow) if t]
    base = 0
    tail = b""
    wanted = False  # the line that starts next was asked for by the line before it
    # a memory map needs a count that takes a memoryview (StringZilla's; bytes.count
    # would copy each window, which is what the map saves)
    windows = (
        _mapped_windows(stream, chunk_size, limit)
        if mapped and finder.counter == "stringzilla"
        else None
    )
    for data, view, lo, hi in windows or _read_windows(stream, chunk_size, limit):
        first = data.find(b"\n", lo, hi)
        if first == -1:
            tail += data[lo:hi]
            if len(tail) >= MAX_LINE:
                if wanted or any(t in tail for t in literals):
                    yield base + 1, tail
                    wanted = any(f in tail for f in follows)
                base += 1
                tail = b""
            continue
        head = tail + data[lo:first] if tail else bytes(data[lo:first])
        if wanted or any(t in head for t in literals):
            yield base + 1, head
            wanted = any(f in head for f in follows)
        base += 1
        start = first + 1
        end = data.rfind(b"\n", lo, hi) + 1
        forced = -1  # the start of a line asked for by the line before it
        if wanted and start < end:
            forced, wanted = start, False
        hits = finder.line_starts(data, start, end)
        counted = start
        index = 0
        while True:
            hit = hits[index] if index < len(hits) else end
            asked = 0 <= forced <= hit
            if asked:
                line_start, forced = forced, -1
                index += hit == line_start
            elif hit < end:
                line_start = hit
                index += 1
            else:
                break
            line_end = data.find(b"\n", line_start, end)
            line = bytes(data[line_start:line_end])
            if not (asked or exact or any(t in line for t in literals)):
                continue  # a key matched, the whole trigger did not
            base += count(view, counted, line_start)
            counted = line_start
            yield base + 1, line
            if follows and any(f in line for f in follows):
                if line_end + 1 < end:
                    forced = line_end + 1
                else:
                    wanted = True  # it starts in the next chunk
        base += count(view, counted, end)
        tail = bytes(data[end:hi])
    if tail:
        if wanted or any(t in tail for t in literals):
            yield base + 1, tail
            wanted = any(f in tail for f in follows)
        base += 1
    past = 0  # lines read past the limit because the line before asked for them
    while wanted and limit is not None and past < FOLLOW_PAST_LIMIT:
        after = stream.readline(MAX_LINE)
        if not after:
            break
        past += 1
        line = after.rstrip(b"\n")
        yield base + past, line
        wanted = any(f in line for f in follows)
    return base


Window = tuple[Any, Any, int, int]
"""``(data, view, lo, hi)``: the input's bytes ``lo:hi`` are ``data[lo:hi]`` (``find``,
``rfind``, slices), ``view`` is the same bytes for the line count."""


def _read_windows(stream: BinaryIO, chunk_size: int, limit: int | None) -> Iterator[Window]:
    """The stream read chunk by chunk (a pipe, stdin, a file without StringZilla)."""
    remaining = limit
    read = _chunk_reader(stream, chunk_size)
    while True:
        size = chunk_size if remaining is None else min(chunk_size, remaining)
        data = read(size) if size > 0 else b""
        if not data:
            return
        if remaining is not None:
            remaining -= len(data)
        yield data, data, 0, len(data)


def _mapped_windows(
    stream: BinaryIO, chunk_size: int, limit: int | None
) -> Iterator[Window] | None:
    """A regular file's windows from a read-only memory map (None if it cannot be mapped).

    Read into a buffer, a 1 GB file cost 0.1-0.6 s of kernel time copying it (the
    second figure whenever the shared build machine was busy), mapped about 0.01 s, and
    the literal search and the line count read the page cache in place. The windows are
    the byte ranges the reads would return, so both give the same lines. The map is
    the file as it was when the scan started; the stream is left where the reads would
    leave it. Known gap, as for ripgrep's ``--mmap``: a file truncated while one window
    (about 2 ms) is searched ends the process with SIGBUS; a file truncated earlier
    ends the scan at its new size (each window is cut to ``fstat``'s size first). So only
    an operator's bulk scan maps (``candidates(mapped=True)``); the node's checks read.
    """
    try:
        fd = stream.fileno()
        start = stream.tell()
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size <= start:
            return None
        mapping = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None
    stop = info.st_size if limit is None else min(info.st_size, start + limit)
    return _windows_of(mapping, stream, fd, start, stop, chunk_size)


def _windows_of(
    mapping: mmap.mmap, stream: BinaryIO, fd: int, start: int, stop: int, chunk_size: int
) -> Iterator[Window]:
    view = memoryview(mapping)
    pos = start
    try:
        if hasattr(mapping, "madvise"):
            mapping.madvise(mmap.MADV_SEQUENTIAL)  # read-ahead for a file not yet cached
        while pos < stop:
            hi = min(pos + chunk_size, stop, os.fstat(fd).st_size)
            if hi <= pos:
                break  # truncated meanwhile: its pages past the new end would raise SIGBUS
            yield mapping, view, pos, hi
            pos = hi
        stream.seek(pos)
    finally:
        view.release()
        mapping.close()


def _chunk_reader(stream: BinaryIO, chunk_size: int) -> Callable[[int], bytes | bytearray]:
    """``read(size)`` that refills one buffer instead of allocating a new chunk each time.

    A fresh chunk-sized ``bytes`` per read costs page faults on every chunk (about a
    tenth of the whole scan). A full chunk comes back as the shared buffer,
    valid until the next call; a short one (the end, a pipe) as a copy.
    """
    readinto = getattr(stream, "readinto", None)
    if readinto is None:
        return stream.read
    buffer = bytearray(chunk_size)

    def read(size: int) -> bytes | bytearray:
        if size != len(buffer):
            return stream.read(size)
        count = readinto(buffer) or 0
        return buffer if count == size else bytes(buffer[:count])

    return read


def _ranges(path: str, parts: int) -> list[tuple[int, int]]:
    """Split ``path`` into ``parts`` byte ranges that start at line starts."""
    size = os.path.getsize(path)
    cuts = [0]
    with open(path, "rb") as handle:
        for i in range(1, parts):
            handle.seek(max(size * i // parts, cuts[-1]))
            handle.readline()
            cuts.append(min(handle.tell(), size))
    cuts.append(size)
    return list(pairwise(cuts))


def _scan_range(
    path: str,
    start: int,
    stop: int,
    triggers: Sequence[bytes],
    engine: str | None,
    follow: Sequence[bytes],
) -> tuple[list[tuple[int, bytes]], int]:
    with open(path, "rb") as handle:
        handle.seek(start)
        generator = candidates(
            handle, triggers, limit=stop - start, engine=engine, follow=follow, mapped=True
        )
        found = []
        while True:
            try:
                found.append(next(generator))
            except StopIteration as done:
                return found, done.value or 0


def candidates_parallel(
    path: str,
    triggers: Sequence[bytes],
    workers: int,
    engine: str | None = None,
    follow: Sequence[bytes] = (),
) -> Generator[tuple[int, bytes], None, int]:
    """Like :func:`candidates` on a whole file, with the passes split over ``workers`` processes.

    Results come in file order. The return value is the file's line count. A line
    that ``follow`` asks for past a range's end comes from that range's worker (the
    next range's may yield it too, as a candidate of its own: it comes out once).
    Uses ``fork``; call it from a process without threads (the CLI).
    """
    from concurrent.futures import ProcessPoolExecutor  # only the CLI on big files needs these
    from multiprocessing import get_context

    ranges = _ranges(path, workers)
    with ProcessPoolExecutor(max_workers=len(ranges), mp_context=get_context("fork")) as pool:
        futures = [
            pool.submit(_scan_range, path, a, b, list(triggers), engine, list(follow))
            for a, b in ranges
        ]
        base = last = 0
        for future in futures:
            found, lines = future.result()
            for lineno, line in found:
                if base + lineno > last:
                    last = base + lineno
                    yield last, line
            base += lines
    return base
