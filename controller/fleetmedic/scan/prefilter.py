"""Find candidate lines in a large byte stream without looking at every line.

A GPU node's kernel log is mostly other things; only lines containing one of
a few literals (``NVRM``, ``SXid``, ``amdgpu``, ...) can be GPU faults.
:func:`candidates` reads the stream in large chunks and, per literal, lets C
code search the whole chunk (the regex engine for short literals, whose
first byte it skips to quickly; ``bytes.find`` for long ones). Only the lines
around the hits are cut out and decoded. Line numbers come from one
``bytes.count(b"\\n")`` pass per chunk.

This is the part that makes ``fleetmedic scan`` fast on big files; the
per-line path (:meth:`fleetmedic.scan.scanner.Scanner.feed`) does the same
test with ``in`` on each line.
"""

from __future__ import annotations

import re
from typing import BinaryIO, Iterable, Iterator

CHUNK_SIZE = 16 * 1024 * 1024
"""Bytes read per step. Large enough that per-chunk overhead vanishes, small
enough to stay well inside the agent's memory limit."""

MAX_LINE = 1024 * 1024
"""A "line" longer than this is cut; the rest is read as the next line."""

_LONG = 8


def _searchers(triggers: Iterable[bytes]):
    searchers = []
    for trigger in dict.fromkeys(triggers):
        if len(trigger) >= _LONG:
            searchers.append((trigger, None))
        else:
            searchers.append((trigger, re.compile(re.escape(trigger))))
    return searchers


def _hit_lines(buf: bytes, end: int, searchers) -> list[int]:
    starts: set[int] = set()
    for trigger, regex in searchers:
        if regex is not None:
            for match in regex.finditer(buf, 0, end):
                starts.add(buf.rfind(b"\n", 0, match.start()) + 1)
        else:
            pos = buf.find(trigger, 0, end)
            while pos != -1:
                starts.add(buf.rfind(b"\n", 0, pos) + 1)
                pos = buf.find(trigger, pos + 1, end)
    return sorted(starts)


def candidates(stream: BinaryIO, triggers: Iterable[bytes], chunk_size: int = CHUNK_SIZE
               ) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line_number, line)`` for every line containing a trigger.

    Line numbers are 1-based over the whole stream; ``line`` has no newline.
    After exhaustion, the generator's return value (``StopIteration.value``)
    is the total number of lines read.
    """
    searchers = _searchers(triggers)
    base = 0            # lines before buf
    tail = b""
    while True:
        data = stream.read(chunk_size)
        eof = not data
        buf = tail + data if tail else data
        if not buf:
            break
        if eof:
            end = len(buf)
            if not buf.endswith(b"\n"):
                buf += b"\n"
                end += 1
        else:
            end = buf.rfind(b"\n") + 1
            if end == 0:
                if len(buf) < MAX_LINE:
                    tail = buf
                    continue
                end = len(buf)
        counted = 0
        for start in _hit_lines(buf, end, searchers):
            stop = buf.find(b"\n", start, end)
            if stop == -1:
                stop = end
            base += buf.count(b"\n", counted, start)
            counted = start
            yield base + 1, buf[start:stop]
        base += buf.count(b"\n", counted, end)
        if end == len(buf) and not buf.endswith(b"\n"):
            base += 1       # a cut over-long line counts as a line
        tail = buf[end:]
        if eof:
            break
    return base
