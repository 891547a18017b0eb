"""Where the pre-filter's trigger literals occur in a buffer: two engines, one answer.

:func:`finder` returns an object whose ``line_starts(data, start, end)`` gives the
sorted start offsets of the lines in ``data[start:end]`` (whole lines, each ending
in ``\\n``) that may contain a trigger. An engine may return more lines than
needed, never fewer; one that is not ``exact`` does (the ``re`` engine searches
for parts of the triggers), and the caller checks each such line for a trigger
again.

- ``hyperscan``: all literals in one pass of Hyperscan's multi-literal matcher
  (the ``hyperscan`` package, which bundles Vectorscan). This is what grep does
  for ``-E 'a|b|c'``, and the reason it is fast.
- ``re``: the standard library only, for platforms without a Hyperscan wheel.
  One regex pass per distinct first byte of the search keys
  (:func:`search_keys`), each a tight C loop that skips to that byte.

Why Hyperscan and not RE2 (``google-re2``), measured on this project's 2-core
build machine (x86_64, Python 3.11, a 1 GB mixed kernel log, CPU seconds per GB
under the same load): Hyperscan finds the 7 catalog literals in 0.5 s, RE2's
``finditer`` over the same alternation takes 2.6 s, slower than ``grep -E``
(1.8 s) and than this module's ``re`` engine, because RE2 runs its DFA over
every byte instead of skipping to rare literals. Both ship wheels for CPython
3.11 on x86_64 and aarch64 (manylinux, musllinux), both take ``bytes``,
``bytearray`` and ``memoryview`` without a copy; RE2 is smaller (1.6 MB against
6.4 MB installed). Licences: the binding is MIT, Vectorscan BSD-3-Clause (RE2:
BSD-3-Clause). One limit of the binding: it passes a buffer's length to
``hs_scan`` as a 32-bit count, so a buffer of 4 GiB or more is silently scanned
only in part (RE2 has no such limit); :data:`MAX_SCAN` keeps every call far
below it. ``FLEETMEDIC_SCAN_ENGINE=re`` (environment) forces the standard-library
engine, to compare or to work around a broken install.

Line numbers. Findings carry their line number, so the bulk scan also counts
every newline of the file; with Hyperscan finding the literals at 3 to 4 GB/s,
``bytes.count(b"\\n")`` (a plain byte loop in CPython, 1.5 to 2.5 GB/s here) was
the larger part of a scan. A finder therefore also counts newlines
(``count_lines``): the ``hyperscan`` engine with StringZilla's ``count`` (SIMD,
about 11 GB/s here, 0.5 ms to import) when the ``stringzilla`` wheel is
installed and gives ``bytes.count``'s answer on a probe, else with
``bytes.count``; the ``re`` engine always with ``bytes.count`` (standard library
only). Same answer either way; only the speed differs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from functools import lru_cache
from itertools import combinations
from typing import Any, Protocol

try:
    import hyperscan
except ImportError:  # no wheel for this platform: the pure-Python engine does the work
    hyperscan = None  # type: ignore[assignment]

try:
    import stringzilla
except ImportError:  # no wheel for this platform: bytes.count counts the lines
    stringzilla = None

ENGINE_ENV = "FLEETMEDIC_SCAN_ENGINE"
"""Environment variable that picks an engine (``hyperscan`` or ``re``) instead of the default."""

ENGINES = ("hyperscan", "re")

MAX_SCAN = 1 << 30
"""Most bytes one ``line_starts`` call takes (the binding's 32-bit length, with room to spare)."""

_MIN_KEY = 3

Buffer = bytes | bytearray


class Finder(Protocol):
    """One engine bound to one set of triggers; not shared between threads."""

    name: str
    exact: bool
    """True if every line returned holds a whole trigger (no check needed)."""
    counter: str
    """What counts newlines: ``stringzilla`` or ``bytes.count``."""

    def line_starts(self, data: Buffer, start: int, end: int) -> list[int]: ...

    def count_lines(self, data: Buffer, start: int, end: int) -> int:
        """The number of ``\\n`` bytes in ``data[start:end]``."""
        ...


def available() -> tuple[str, ...]:
    """The engines that work here, the fastest first."""
    return ("hyperscan", "re") if _hyperscan_works() else ("re",)


def default_engine() -> str:
    """:data:`ENGINE_ENV` if set (and usable), else the fastest available engine."""
    wanted = os.environ.get(ENGINE_ENV, "").strip().lower()
    found = available()
    return wanted if wanted in found else found[0]


def finder(triggers: Iterable[bytes], engine: str | None = None) -> Finder:
    """A :class:`Finder` for ``triggers`` on ``engine`` (default: :func:`default_engine`).

    Raises ValueError for an unknown engine or one not installed here.
    """
    name = engine or default_engine()
    literals = tuple(t for t in dict.fromkeys(triggers) if t)
    if name not in available():
        raise ValueError(f"scan engine {name!r} is not available here (have: {available()})")
    if name == "hyperscan":
        return _HyperscanFinder(literals)
    return _ReFinder(literals)


@lru_cache(maxsize=1)
def _hyperscan_works() -> bool:
    """The module imports and compiles a database on this CPU (Vectorscan refuses
    CPUs without the vector instructions its build assumes)."""
    if hyperscan is None:
        return False
    try:
        _hs_database((b"NVRM",))
    except hyperscan.error:
        return False
    return True


@lru_cache(maxsize=1)
def _stringzilla_works() -> bool:
    """StringZilla imports and counts newlines as ``bytes.count`` does (a probe that
    crosses its SIMD block sizes, with a window that starts and ends inside a line)."""
    if stringzilla is None:
        return False
    probe = bytearray(b"ab\ncd\n\n" * 100 + b"x" * 77 + b"\n")
    try:
        return all(
            stringzilla.count(probe, b"\n", start, end) == probe.count(b"\n", start, end)
            for start, end in ((0, len(probe)), (1, len(probe) - 1), (5, 300), (7, 7))
        )
    except Exception:  # a broken build: fall back rather than fail a scan
        return False


def _bytes_count(data: Buffer, start: int, end: int) -> int:
    return data.count(b"\n", start, end)


def _stringzilla_count(data: Buffer, start: int, end: int) -> int:
    # Callers pass 0 <= start <= end <= len(data), as for bytes.count.
    return int(stringzilla.count(data, b"\n", start, end))


@lru_cache(maxsize=16)
def _hs_database(literals: tuple[bytes, ...]) -> Any:
    database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    database.compile(
        expressions=[re.escape(literal) for literal in literals],
        ids=list(range(len(literals))),
        flags=[0] * len(literals),
    )
    return database


class _HyperscanFinder:
    """All literals in one Hyperscan pass; a match reports where it ends, and the
    line it ends in starts after the newline before that (a literal holds no newline)."""

    name = "hyperscan"

    def __init__(self, literals: tuple[bytes, ...]) -> None:
        # It matches the literals themselves: a line it returns holds one, unless the
        # literal spans a newline (none of the catalog's does).
        self.exact = not any(b"\n" in literal for literal in literals)
        fast = _stringzilla_works()
        self.counter = "stringzilla" if fast else "bytes.count"
        self.count_lines = _stringzilla_count if fast else _bytes_count
        self._database = _hs_database(literals) if literals else None
        # Own scratch space: the database's default one must not be used by two
        # threads at once, and a Scanner may run in any thread.
        self._scratch = hyperscan.Scratch(self._database) if literals else None
        self._ends: list[int] = []
        append = self._ends.append
        self._on_match = lambda _id, _from, to, _flags, _context: append(to)

    def line_starts(self, data: Buffer, start: int, end: int) -> list[int]:
        if self._database is None or end <= start:
            return []
        if end - start > MAX_SCAN:
            raise ValueError(f"scan window of {end - start} bytes exceeds {MAX_SCAN}")
        ends = self._ends
        ends.clear()
        with memoryview(data) as view, view[start:end] as window:
            self._database.scan(window, match_event_handler=self._on_match, scratch=self._scratch)
        # Matches come in order of their end, so line starts come out sorted.
        return list(dict.fromkeys(data.rfind(b"\n", 0, start + to) + 1 for to in ends))


class _ReFinder:
    """The standard-library engine: one regex pass per distinct first byte of the keys."""

    name = "re"
    exact = False  # it searches for the keys, suffixes of the triggers
    counter = "bytes.count"

    def __init__(self, literals: tuple[bytes, ...]) -> None:
        self._searchers = searchers(literals)
        self.count_lines = _bytes_count

    def line_starts(self, data: Buffer, start: int, end: int) -> list[int]:
        starts: set[int] = set()
        for regex in self._searchers:
            for match in regex.finditer(data, start, end):
                starts.add(data.rfind(b"\n", 0, match.start()) + 1)
        return sorted(starts)


def _cost(byte: int) -> int:
    """How often a byte starts a search attempt in typical logs (lower is rarer)."""
    return 1 if 65 <= byte <= 90 else 3  # capitals are rare in log text, the rest is not


@lru_cache(maxsize=16)
def search_keys(triggers: tuple[bytes, ...]) -> tuple[bytes, ...]:
    """A search key per trigger: a suffix of it, chosen so that few first bytes cover all.

    A line that contains a trigger contains its key, so searching for keys
    finds a superset of the candidate lines (the literal test then drops the
    rest). Each distinct first byte costs the ``re`` engine one pass over the
    data, so the keys are picked as a smallest set of first bytes (rare ones
    preferred) that starts a suffix of at least three bytes of every trigger.
    For example ``nvidia-nvswitch`` is searched as ``a-nvswitch`` in the same
    pass as ``amdgpu``.
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


def searchers(triggers: Iterable[bytes]) -> list[re.Pattern[bytes]]:
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
    found = []
    for members in groups.values():
        head = re.escape(members[0][:1])
        rests = b"|".join(re.escape(m[1:]) for m in sorted(members, key=len, reverse=True))
        found.append(
            re.compile(head + b"(?:" + rests + b")" if len(members) > 1 else re.escape(members[0]))
        )
    return found
