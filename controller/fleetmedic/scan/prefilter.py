"""Find candidate lines in a large byte stream without looking at every line.

A GPU node's kernel log is mostly other things; only lines containing one of
a few literals (``NVRM``, ``SXid``, ``amdgpu``, ...) can be GPU faults.
:func:`candidates` reads the stream in large chunks and, per literal, lets C
code search the whole chunk (the regex engine, which skips to a key's first
byte in a tight loop; keys sharing a first byte share a pass, and
:func:`search_keys` picks keys so that few first bytes cover all literals).
Only the lines around the hits are cut out. Line numbers come from one
``bytes.count(b"\\n")`` pass per chunk. Chunks are searched in place (no
concatenation).

What this costs is therefore one fast pass per distinct first byte (three
for the shipped catalog), plus one for the line count; see
``bench/scan_throughput.py`` for the figure against grep.
:func:`candidates_parallel` splits a file into byte ranges and runs the
passes in worker processes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Generator, Iterable, Sequence
from functools import lru_cache
from itertools import combinations, pairwise
from typing import BinaryIO

CHUNK_SIZE = 16 * 1024 * 1024
"""Bytes read per step: large enough that per-chunk overhead vanishes, small
enough to stay far inside the agent's memory limit."""

MAX_LINE = 1024 * 1024
"""A "line" longer than this is cut; the rest is read as the next line."""

PARALLEL_MIN_BYTES = 256 * 1024 * 1024
"""Below this, worker start-up costs more than it saves."""

_MIN_KEY = 3


def _cost(byte: int) -> int:
    """How often a byte starts a search attempt in typical logs (lower is rarer)."""
    return 1 if 65 <= byte <= 90 else 3  # capitals are rare in log text, the rest is not


@lru_cache(maxsize=16)
def search_keys(triggers: tuple[bytes, ...]) -> tuple[bytes, ...]:
    """A search key per trigger: a suffix of it, chosen so that few first bytes cover all.

    A line that contains a trigger contains its key, so searching for keys
    finds a superset of the candidate lines (the literal test then drops the
    rest). Each distinct first byte costs one pass over the data, so the keys
    are picked as a smallest set of first bytes (rare ones preferred) that
    starts a suffix of at least three bytes of every trigger. For example
    ``nvidia-nvswitch`` is searched as ``a-nvswitch`` in the same pass as
    ``amdgpu``.
    """
    literals = [t for t in dict.fromkeys(triggers) if t]
    starts = [{t[i] for i in range(max(1, len(t) - _MIN_KEY + 1))} for t in literals]
    options = sorted(set().union(*starts) if starts else set())
    best: tuple[int, ...] | None = None
    for size in range(1, len(literals) + 1):
        covers = [c for c in combinations(options, size) if all(s & set(c) for s in starts)]
        if covers:
            best = min(covers, key=lambda c: sum(_cost(b) for b in c))
            break
    chosen = set(best or ())
    keys = []
    for literal, first in zip(literals, starts, strict=True):
        # The longest suffix that starts with a chosen byte: specific keys hit fewer other lines.
        usable = first & chosen
        keys.append(literal[min(literal.index(b) for b in usable) :] if usable else literal)
    return tuple(keys)


def _searchers(triggers: Iterable[bytes]) -> list[re.Pattern[bytes]]:
    """One regex per distinct first byte of the search keys.

    The regex engine finds a pattern that starts with one literal byte with
    a tight C loop over the buffer (about 3 GB/s here, faster than
    ``bytes.find`` for these short literals), then checks the rest. Keys
    that share their first byte are searched together as
    ``X(?:rest1|rest2)`` at the cost of one pass.
    """
    groups: dict[int, list[bytes]] = {}
    for key in search_keys(tuple(triggers)):
        groups.setdefault(key[0], []).append(key)
    searchers = []
    for members in groups.values():
        head = re.escape(members[0][:1])
        rests = b"|".join(re.escape(m[1:]) for m in sorted(members, key=len, reverse=True))
        searchers.append(
            re.compile(head + b"(?:" + rests + b")" if len(members) > 1 else re.escape(members[0]))
        )
    return searchers


def _hit_lines(
    data: bytes | bytearray, start: int, end: int, searchers: list[re.Pattern[bytes]]
) -> list[int]:
    """Sorted start offsets of the lines in ``data[start:end]`` that contain a trigger."""
    starts: set[int] = set()
    for regex in searchers:
        for match in regex.finditer(data, start, end):
            starts.add(data.rfind(b"\n", 0, match.start()) + 1)
    return sorted(starts)


def candidates(
    stream: BinaryIO,
    triggers: Sequence[bytes],
    chunk_size: int = CHUNK_SIZE,
    limit: int | None = None,
) -> Generator[tuple[int, bytes], None, int]:
    """Yield ``(line_number, line)`` for every line that contains a trigger.

    Line numbers are 1-based from the stream's current position; ``line``
    has no newline. ``limit`` stops after that many bytes (a byte range of a
    file). The generator's return value (``StopIteration.value``) is the
    number of lines read.
    """
    searchers = _searchers(triggers)
    literals = [t for t in dict.fromkeys(triggers) if t]
    base = 0
    tail = b""
    remaining = limit
    read = _chunk_reader(stream, chunk_size)
    while True:
        size = chunk_size if remaining is None else min(chunk_size, remaining)
        data = read(size) if size > 0 else b""
        if remaining is not None:
            remaining -= len(data)
        if not data:
            if tail:
                if any(t in tail for t in literals):
                    yield base + 1, tail
                base += 1
            return base
        first = data.find(b"\n")
        if first == -1:
            tail += bytes(data)
            if len(tail) >= MAX_LINE:
                if any(t in tail for t in literals):
                    yield base + 1, tail
                base += 1
                tail = b""
            continue
        head = tail + data[:first] if tail else bytes(data[:first])
        if any(t in head for t in literals):
            yield base + 1, head
        base += 1
        start = first + 1
        end = data.rfind(b"\n") + 1
        counted = start
        for line_start in _hit_lines(data, start, end, searchers):
            line = bytes(data[line_start : data.find(b"\n", line_start, end)])
            if not any(t in line for t in literals):
                continue  # a key matched, the whole trigger did not
            base += data.count(b"\n", counted, line_start)
            counted = line_start
            yield base + 1, line
        base += data.count(b"\n", counted, end)
        tail = bytes(data[end:])


def _chunk_reader(stream: BinaryIO, chunk_size: int) -> Callable[[int], bytes | bytearray]:
    """``read(size)`` that refills one buffer instead of allocating a new chunk each time.

    A fresh 16 MB ``bytes`` per read costs page faults on every chunk (about a
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
    path: str, start: int, stop: int, triggers: Sequence[bytes]
) -> tuple[list[tuple[int, bytes]], int]:
    with open(path, "rb") as handle:
        handle.seek(start)
        generator = candidates(handle, triggers, limit=stop - start)
        found = []
        while True:
            try:
                found.append(next(generator))
            except StopIteration as done:
                return found, done.value or 0


def candidates_parallel(
    path: str, triggers: Sequence[bytes], workers: int
) -> Generator[tuple[int, bytes], None, int]:
    """Like :func:`candidates` on a whole file, with the passes split over ``workers`` processes.

    Results come in file order. The return value is the file's line count.
    Uses ``fork``; call it from a process without threads (the CLI).
    """
    from concurrent.futures import ProcessPoolExecutor  # only the CLI on big files needs these
    from multiprocessing import get_context

    ranges = _ranges(path, workers)
    with ProcessPoolExecutor(max_workers=len(ranges), mp_context=get_context("fork")) as pool:
        futures = [pool.submit(_scan_range, path, a, b, list(triggers)) for a, b in ranges]
        base = 0
        for future in futures:
            found, lines = future.result()
            for lineno, line in found:
                yield base + lineno, line
            base += lines
    return base
