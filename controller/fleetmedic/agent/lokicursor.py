"""Where the Loki source is: per LogQL query, what was handled (agent/lokisource.py).

Like Promtail's positions file, it is what lets the source resume after a restart, a
crash or a Loki outage without skipping a line or handling one twice. It lives in a file
(``fleetmedic watch loki``) or on a ConfigMap (run by the controller, so the next leader
resumes where the last one stopped).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from fleetmedic.adapters.cluster import Store
from fleetmedic.adapters.loki import Entry
from fleetmedic.errors import NotFoundError

log = logging.getLogger("fleetmedic.loki")

SETTLE = 30 * 10**9  # ns: a line this much older than the newest handled is still read
SEEN_MAX = 2000  # lines kept in the cursor per query (about 90 kB of JSON at most)


@dataclass
class Cursor:
    """Per query: a floor timestamp, and the lines handled at or after it (hash -> time).

    A line is new when it is at or after the floor and not among those handled. The floor
    trails the newest line handled by :data:`SETTLE` (or less, when more than
    :data:`SEEN_MAX` lines were handled within it): one query covers many nodes' streams,
    and a shipper's batch (Promtail waits up to a second) can reach Loki after another
    node's newer line, so a line older than the newest handled is still read when it comes
    within the window. Reads start at the floor; the lines seen keep them from counting
    twice. Older cursors (``at``: the hashes at exactly ``ts``) read the same way."""

    done: dict[str, tuple[int, dict[str, int]]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None, where: str) -> Cursor:
        if not text:
            return cls()
        try:
            raw = json.loads(text)
            done = {}
            for q, v in raw.items():
                ts, at = int(v["ts"]), v["at"]
                seen = {str(h): int(t) for h, t in at.items()} if isinstance(at, dict) else None
                done[q] = (ts, seen if seen is not None else {str(h): ts for h in at})
            return cls(done)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("cursor %s unreadable (%s): starting from the look-back window", where, exc)
            return cls()

    def dumps(self) -> str:
        return json.dumps({q: {"ts": ts, "at": at} for q, (ts, at) in self.done.items()}, indent=1)

    def floor(self, query: str) -> int:
        """Where a read of ``query`` starts (0: never read)."""
        return self.done.get(query, (0, {}))[0]

    def new(self, query: str, entries: Sequence[Entry]) -> list[Entry]:
        """``entries`` not handled yet: at or after the floor, and not among those seen."""
        floor, seen = self.done.get(query, (0, {}))
        return [e for e in entries if e.ts >= floor and _hash(e) not in seen]

    def advance(self, query: str, entries: Sequence[Entry]) -> None:
        """``entries`` were handled: note them, and move the floor up behind them."""
        if not entries:
            return
        floor, seen = self.done.get(query, (0, {}))
        seen = {**seen, **{_hash(e): e.ts for e in entries}}
        floor = max(floor, max(seen.values()) - SETTLE)
        if len(seen) > SEEN_MAX:  # a storm: a shorter window rather than an unbounded cursor
            floor = max(floor, sorted(seen.values())[-SEEN_MAX])
        self.done[query] = (floor, {h: t for h, t in seen.items() if t >= floor})


class CursorStore(Protocol):
    """Where the cursor lives between runs."""

    def load(self) -> Cursor: ...

    def save(self, cursor: Cursor) -> None: ...


@dataclass(frozen=True)
class FileCursor:
    """A JSON file, replaced atomically (``fleetmedic watch loki``: one source, one host)."""

    path: Path

    def load(self) -> Cursor:
        try:
            return Cursor.parse(self.path.read_text(), str(self.path))
        except FileNotFoundError:
            return Cursor()

    def save(self, cursor: Cursor) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(cursor.dumps())
        os.replace(tmp, self.path)

    def __str__(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class ConfigMapCursor:
    """One key of a ConfigMap (the controller's own, which its Role may already read and
    patch), so whichever controller leads resumes where the last leader stopped. Written
    only when the cursor moved: an idle cluster costs no API writes."""

    kube: Store
    namespace: str
    name: str
    key: str = "loki-cursor"

    def load(self) -> Cursor:
        cm = self.kube.get_config_map(self.namespace, self.name)
        if cm is None:
            raise NotFoundError(
                f"configmap {self.namespace}/{self.name} (the Loki cursor's home) does not exist"
            )
        return Cursor.parse((cm.get("data") or {}).get(self.key), str(self))

    def save(self, cursor: Cursor) -> None:
        self.kube.patch_config_map_data(self.namespace, self.name, {self.key: cursor.dumps()})

    def __str__(self) -> str:
        return f"configmap {self.namespace}/{self.name} key {self.key}"


def _hash(e: Entry) -> str:
    key = json.dumps([sorted(e.labels.items()), e.ts, e.line])
    return hashlib.blake2b(key.encode(), digest_size=8).hexdigest()
