"""The scan package's and the catalog's regular expressions, built from programs kept in
the user's cache.

``re.compile`` parses a pattern and builds its program (the opcode list the C matcher
runs) in Python; for the catalog's ~75 regexes and the scan modules' ~50 that was about a
fifth of ``fleetmedic scan``'s start-up (0.03 s of 0.16 s CPU), where grep reads a whole
gigabyte in 1.2 s (issue 39). The program depends only on the pattern's text, its flags
and the Python that built it, so :class:`Programs` keeps it per pattern in one marshal
file beside the catalog's parse (:mod:`.catalogcache`) and builds the pattern from it
with ``_sre.compile``, the last step ``re.compile`` itself takes. :func:`compile` is
``re.compile`` for the scan modules; the catalog's load writes what was added
(:func:`shared`'s :meth:`Programs.save`).

- a program is kept only after the pattern built from it compared equal to
  ``re.compile``'s (same text, flags and program: ``re.Pattern``'s own equality), so the
  kept form is what this Python would build; a pattern that does not compile raises its
  ``re.error`` at every load and is never kept;
- the file is named by the Python version and the matcher's magic number, so another
  Python never reads it; ``_sre.compile`` checks a program before it builds on it, and a
  damaged file (or any error there) means the pattern is compiled as usual;
- the file is trusted as Python trusts its ``__pycache__`` (and :mod:`.catalogcache` its
  parse): it lives in the user's own cache directory, mode 0700;
- a cache that cannot be read or written costs the compiles, nothing else.

Known gap: ``_sre.compile`` and ``re._parser``/``re._compiler`` are CPython's private
interface (stable from 3.11 to 3.13). Where they differ or are missing, every pattern is
compiled with ``re.compile``, as before.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import marshal
import os
import re
import sys
from pathlib import Path
from typing import Any

from fleetmedic.scan import catalogcache

_sre: Any
_compiler: Any
_parser: Any
try:  # CPython's matcher and its compiler (private, untyped: see the module's known gap)
    _sre = importlib.import_module("_sre")
    _compiler = importlib.import_module("re._compiler")
    _parser = importlib.import_module("re._parser")
except ImportError:  # pragma: no cover - another interpreter
    _sre = _compiler = _parser = None

Program = tuple[int, list[int], int, dict[str, int], tuple[str | None, ...]]
"""``_sre.compile``'s arguments after the pattern: flags, code, groups, both indexes."""


def location(catalog_cache: Path | None) -> Path | None:
    """The programs' file beside the catalog's kept parse (None: no cache directory)."""
    if catalog_cache is None or _sre is None:
        return None
    tag = f"{sys.implementation.cache_tag}-{_sre.MAGIC}"
    return catalog_cache.with_name(f"regex-{tag}.marshal")


class Programs:
    """Patterns by their text: built from a kept program when there is one, else
    compiled (and their programs kept by :meth:`save`)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.kept: dict[tuple[str, int], Program] = _read(path) if path is not None else {}
        self.added = 0

    def compile(self, text: str, flags: int = 0) -> re.Pattern[str]:
        """``re.compile(text, flags)``; raises ``re.error`` for a bad pattern, as it does."""
        key = (text, int(flags))
        program = self.kept.get(key)
        if program is not None:
            try:
                pattern: re.Pattern[str] = _sre.compile(text, *program)
                return pattern
            except Exception:  # a damaged program (or any error): compile as usual
                del self.kept[key]
        pattern = re.compile(text, flags)
        if self.path is not None:
            program = _program(text, key[1], pattern)
            if program is not None:
                self.kept[key] = program
                self.added += 1
        return pattern

    def save(self) -> None:
        """Write the programs when some were added (best effort, atomic)."""
        if self.path is None or not self.added:
            return
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            temporary.write_bytes(marshal.dumps(self.kept))
            os.replace(temporary, self.path)
            self.added = 0
        except (OSError, ValueError):  # read-only or full: the next run compiles again
            with contextlib.suppress(OSError):
                temporary.unlink()


DATA_DIR = Path(__file__).resolve().parent.parent / "data"
"""The packaged catalog's directory (its parse's cache file names the programs' file)."""


@functools.cache
def shared() -> Programs:
    """The programs of this process: the scan modules' and every catalog's (a pattern's
    text and flags make its program, whichever file names it)."""
    return Programs(location(catalogcache.location(str(DATA_DIR))))


def compile(text: str, flags: int = 0) -> re.Pattern[str]:
    """``re.compile`` through :func:`shared` (for the scan modules' own regexes)."""
    return shared().compile(text, flags)


def _read(path: Path) -> dict[tuple[str, int], Program]:
    try:
        kept = marshal.loads(path.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):  # absent, cut short, not marshal
        return {}
    return kept if isinstance(kept, dict) else {}


def _program(text: str, flags: int, pattern: re.Pattern[str]) -> Program | None:
    """What ``_sre.compile`` took to build ``pattern`` (the steps of ``re._compiler``'s
    ``compile``), or None when building it again from that does not give ``pattern``."""
    if _sre is None:
        return None
    try:
        parsed: Any = _parser.parse(text, flags)
        code = _compiler._code(parsed, flags)
        groupindex = dict(parsed.state.groupdict)
        indexgroup: list[str | None] = [None] * parsed.state.groups
        for name, index in groupindex.items():
            indexgroup[index] = name
        program: Program = (
            flags | int(parsed.state.flags),
            [int(op) for op in code],  # opcodes are int subclasses marshal refuses
            parsed.state.groups - 1,
            groupindex,
            tuple(indexgroup),
        )
        same = _sre.compile(text, *program) == pattern
    except Exception:  # internals that differ: keep nothing
        return None
    return program if same else None
