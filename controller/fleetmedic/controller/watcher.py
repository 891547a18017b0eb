"""An informer for Nodes: list once, then watch with bookmarks.

The controller never polls: it keeps this cache and wakes as soon as a watch
event arrives, so an idle fleet costs one long watch request every
``watch_timeout`` seconds. On 410 Gone it lists again; on a dropped stream it
resumes from the last resourceVersion it saw (bookmarks keep that fresh).
"""

from __future__ import annotations

import logging
import threading
import time

from fleetmedic.adapters.kube import Expired, Kube
from fleetmedic.errors import FleetmedicError, PermanentError

log = logging.getLogger(__name__)


class NodeWatcher:
    def __init__(self, kube: Kube, label_selector: str | None = None,
                 watch_timeout: int = 300, retry_delay: float = 2.0) -> None:
        self.kube, self.label_selector = kube, label_selector
        self.watch_timeout, self.retry_delay = watch_timeout, retry_delay
        self._nodes: dict[str, dict] = {}
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self.synced = threading.Event()
        self.requests = 0  # list + watch calls made, for the idle-cost benchmark
        self.error: FleetmedicError | None = None

    # -- reading ------------------------------------------------------------
    def snapshot(self) -> dict[str, dict]:
        with self._lock:
            return dict(self._nodes)

    def wait_for_change(self, timeout: float) -> bool:
        """Block until an event arrived (True) or ``timeout`` passed (False)."""
        fired = self._changed.wait(timeout)
        self._changed.clear()
        return fired

    # -- running ------------------------------------------------------------
    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(stop,), name="node-watch", daemon=True)
        thread.start()
        return thread

    def _relist(self) -> str:
        self.requests += 1
        items, rv = self.kube.list_nodes(self.label_selector)
        with self._lock:
            self._nodes = {n["metadata"]["name"]: n for n in items}
        self.synced.set()
        self._changed.set()
        return rv

    def run(self, stop: threading.Event) -> None:
        rv: str | None = None
        while not stop.is_set():
            try:
                if rv is None:
                    rv = self._relist()
                self.requests += 1
                for kind, obj in self.kube.watch_nodes(rv, self.watch_timeout, self.label_selector):
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if kind != "BOOKMARK":
                        self._apply(kind, obj)
                    if stop.is_set():
                        return
            except Expired:
                log.info("node watch expired (410); listing again")
                rv = None
            except PermanentError as exc:
                # RBAC or a bad request will not heal by retrying fast; say so once per try.
                self.error = exc
                log.error("node watch: %s", exc)
                stop.wait(self.retry_delay * 5)
            except FleetmedicError as exc:
                self.error = exc
                log.warning("node watch: %s; retrying in %.0fs", exc, self.retry_delay)
                stop.wait(self.retry_delay)

    def _apply(self, kind: str, node: dict) -> None:
        name = node["metadata"]["name"]
        with self._lock:
            if kind == "DELETED":
                self._nodes.pop(name, None)
            else:
                old = self._nodes.get(name)
                # Ignore events older than what we hold (a relist raced a watch).
                if old and _rv(old) > _rv(node):
                    return
                self._nodes[name] = node
        self._changed.set()

    def put(self, node: dict) -> None:
        """Record our own write at once, so the next decision sees it even
        before the watch event arrives."""
        self._apply("MODIFIED", node)


def _rv(node: dict) -> int:
    try:
        return int(node["metadata"].get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


def wait_synced(watcher: NodeWatcher, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not watcher.synced.wait(0.2):
        if time.monotonic() > deadline:
            raise watcher.error or FleetmedicError(f"could not list nodes within {timeout:.0f}s")
