"""The agent's last view of its Slurm node, kept so a healthy round asks slurmctld nothing.

:class:`NodeCache` holds, per node, the document last read from slurmctld or written to
it, the time, and whether someone else's drain stood on it (adapters/slurmdoc.py says how
the agent uses it). In memory always; given a directory, also in a small JSON file per
node and cluster, so the node's separate agent processes (the daemon, slurmd's health
check and prolog, each a short ``fleetmedic agent --once``) share one view: a file is
written whole to a temporary name and renamed, so a reader sees the old view or the new,
never half of one. A file that is missing, unreadable, from another node or cluster, or
whose time is in the future (a clock set back) is no view at all: the caller reads.

The file's name carries a hash of the cluster's slurm.conf path, because the test
harness runs several clusters whose nodes share names (``n1``) on one host.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

VERSION = 1


@dataclasses.dataclass(frozen=True)
class Kept:
    doc: dict[str, Any]
    at: float  # wall clock, seconds
    foreign: str  # the reason of someone else's drain seen at ``at``, or ""


class NodeCache:
    def __init__(self, directory: Path | None, cluster: str, clock: Callable[[], float]) -> None:
        self.directory = Path(directory) if directory else None
        self.cluster = cluster
        self.clock = clock
        self._mem: dict[str, Kept] = {}
        self._lock = threading.Lock()

    def path(self, node: str) -> Path | None:
        if self.directory is None:
            return None
        tag = hashlib.sha256(self.cluster.encode()).hexdigest()[:12]
        return self.directory / f"slurm-node-{node}-{tag}.json"

    def get(self, node: str, max_age: float) -> Kept | None:
        """The view of ``node`` if it is younger than ``max_age`` seconds (0: never)."""
        if max_age <= 0:
            return None
        now = self.clock()
        with self._lock:
            kept = self._mem.get(node)
        if kept is None or not 0 <= now - kept.at < max_age:
            kept = self._load(node)
        if kept is None or not 0 <= now - kept.at < max_age:
            return None
        return kept

    def put(self, node: str, doc: dict[str, Any], foreign: str) -> None:
        kept = Kept(copy.deepcopy(doc), self.clock(), foreign)
        with self._lock:
            self._mem[node] = kept
        path = self.path(node)
        if path is None:
            return
        body = {"v": VERSION, "node": node, "cluster": self.cluster, "at": kept.at}
        body.update({"foreign": foreign, "doc": kept.doc})
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
            with os.fdopen(fd, "w") as f:
                json.dump(body, f, separators=(",", ":"))
            os.replace(tmp, path)
        except OSError:
            return  # (a view not shared costs one read later, nothing else)

    def _load(self, node: str) -> Kept | None:
        path = self.path(node)
        if path is None:
            return None
        try:
            body = json.loads(path.read_text())
            if body.get("v") != VERSION or body.get("node") != node:
                return None
            if body.get("cluster") != self.cluster or not isinstance(body.get("doc"), dict):
                return None
            kept = Kept(body["doc"], float(body["at"]), str(body.get("foreign") or ""))
        except (OSError, ValueError, TypeError, KeyError):
            return None
        with self._lock:
            self._mem[node] = kept
        return kept

    def forget(self, node: str) -> None:
        with self._lock:
            self._mem.pop(node, None)
        path = self.path(node)
        if path is not None:
            try:
                path.unlink()
            except OSError:
                pass
