"""The packaged catalog's YAML, parsed once per content and kept in the user's cache.

Parsing the catalog's eight YAML files (about 300 KB; libyaml scans them, but PyYAML
builds every object in Python) was the largest part of ``fleetmedic scan``'s start-up:
about 0.08 s of 0.26 s CPU, with ``import yaml``, where grep reads a whole gigabyte in
1.2 s (issue 39). :func:`cached` keeps the parsed data in one file and reads it back
while the YAML bytes are the ones it was parsed from:

- the file holds the SHA-256 of every catalog file's name and bytes (:func:`digest`)
  beside the data, and that is compared on every load: a catalog edited in any byte
  (even with its size and mtime kept) is parsed again and the file rewritten, so a
  stale parse is never used;
- only the parse is skipped: every check of the catalog (sources, actions, regexes,
  families) still runs on the data at every load;
- marshal, not JSON or pickle: it keeps the YAML's types exactly (integer keys stay
  integers, ``True`` stays a bool) and builds nothing but plain data. The file is
  trusted as Python trusts its ``__pycache__``: it lives in the user's own cache
  directory (``$XDG_CACHE_HOME/fleetmedic``, else ``~/.cache/fleetmedic``, mode 0700);
- a cache that cannot be read or written (no home directory, a read-only one, a file
  cut short or from another Python) costs the parse and nothing else.

One file per installed catalog directory (its path's hash in the name), rewritten in
place when the catalog changes, so the cache does not grow with edits.
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

FORMAT = b"fleetmedic catalog cache 1"
"""Part of every digest: change it when what the parse returns changes for the same bytes
(another loader, another post-processing), and every kept parse is stale at once."""

Parsed = dict[str, Any]


def digest(blobs: Mapping[str, bytes]) -> str:
    """The SHA-256 of :data:`FORMAT`, the Python version (marshal's format may change with
    it) and every file's name, length and bytes, in name order."""
    sha = hashlib.sha256(FORMAT)
    sha.update(sys.version.encode())
    for name in sorted(blobs):
        blob = blobs[name]
        sha.update(b"\0%s\0%d\0" % (name.encode(), len(blob)))
        sha.update(blob)
    return sha.hexdigest()


def location(data_dir: str) -> Path | None:
    """Where the parse of the catalog in ``data_dir`` is kept (None: no cache directory)."""
    home = os.environ.get("HOME", "")
    root = os.environ.get("XDG_CACHE_HOME") or (os.path.join(home, ".cache") if home else "")
    if not os.path.isabs(root):  # no home directory (a system service), or a relative XDG
        return None
    tag = hashlib.sha256(data_dir.encode()).hexdigest()[:16]
    return Path(root) / "fleetmedic" / f"catalog-{tag}.marshal"


def cached(
    blobs: Mapping[str, bytes], parse: Callable[[Mapping[str, bytes]], Parsed], path: Path | None
) -> Parsed:
    """``parse(blobs)``, read from ``path`` when it was kept there for these very bytes;
    else parsed and kept there (when ``path`` is not None and can be written)."""
    key = digest(blobs)
    if path is not None:
        kept = _read(path, key)
        if kept is not None:
            return kept
    parsed = parse(blobs)
    if path is not None:
        _write(path, key, parsed)
    return parsed


def _read(path: Path, key: str) -> Parsed | None:
    try:
        stored = marshal.loads(path.read_bytes())  # (marshal.load on a file: 6x slower)
    except (OSError, EOFError, ValueError, TypeError):  # absent, cut short, not marshal
        return None
    if isinstance(stored, tuple) and len(stored) == 2 and stored[0] == key:
        data = stored[1]
        return data if isinstance(data, dict) else None
    return None


def _write(path: Path, key: str, parsed: Parsed) -> None:
    try:
        blob = marshal.dumps((key, parsed))
    except ValueError:  # a value marshal cannot keep (a YAML timestamp): parse every time
        return
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary.write_bytes(blob)
        os.replace(temporary, path)  # atomic: a concurrent reader sees the old or the new
    except OSError:  # a read-only or full cache directory: the next run parses again
        with contextlib.suppress(OSError):
            temporary.unlink()
