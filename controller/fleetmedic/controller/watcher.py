"""An informer for Nodes: list once (in pages), then watch with bookmarks.

The controller never polls: it keeps this cache and wakes as soon as a watch
event arrives, so an idle fleet costs one long watch request every
``watch_timeout`` seconds. On 410 Gone it lists again; on a dropped stream it
resumes from the last resourceVersion it saw (bookmarks keep that fresh).

``transform`` turns each Node into what the cache keeps (client-go calls this an
informer transform). The controller keeps its :class:`NodeView` only, so a Node's
managedFields, capacity, images and the rest are dropped as each one arrives
rather than held for every node of the fleet, and views are computed once per
change instead of once per cycle.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from fleetmedic import logcontext
from fleetmedic.adapters.cluster import Cluster
from fleetmedic.backoff import Backoff
from fleetmedic.controller.parts import Part
from fleetmedic.errors import Expired, FleetmedicError, PermanentError
from fleetmedic.model.config import Config
from fleetmedic.model.nodestate import NodeView, own_annotations
from fleetmedic.model.nodestate import view as view_of

log = logging.getLogger(__name__)

T = TypeVar("T")

RELIST_WAIT = 20.0  # seconds a relist waits for another cluster's to end before going ahead
_relists = threading.Semaphore(1)


def _keep(node: dict) -> Any:
    return node


class Informer(Generic[T]):
    """List, then watch, of what a subclass names (:meth:`_list_pages`, :meth:`_watch`):
    the Nodes (:class:`NodeWatcher`), the pods (podwatch.py)."""

    what = "object"

    def __init__(
        self,
        watch_timeout: int = 300,
        retry_delay: float = 2.0,
        transform: Callable[[dict], T] = _keep,
    ) -> None:
        self.watch_timeout, self.retry_delay = watch_timeout, retry_delay
        self.transform = transform
        self._items: dict[str, tuple[int, T]] = {}  # name -> (resourceVersion, kept form)
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self.synced = threading.Event()
        self.requests = 0  # list + watch calls made, for the idle-cost benchmark
        self.error: FleetmedicError | None = None

    # -- reading ------------------------------------------------------------
    def snapshot(self) -> dict[str, T]:
        with self._lock:
            return {name: item for name, (_, item) in self._items.items()}

    def wait_for_change(self, timeout: float) -> bool:
        """Block until an event arrived (True) or ``timeout`` passed (False)."""
        fired = self._changed.wait(timeout)
        self._changed.clear()
        return fired

    # -- running ------------------------------------------------------------
    def start(self, stop: threading.Event) -> threading.Thread:
        thread = logcontext.thread(self.run, args=(stop,), name=f"{self.what}-watch")
        thread.start()
        return thread

    def _relist(self) -> str:
        # One relist at a time in this process (every cluster's watchers): the pages being
        # decoded are what sets the resident high-water mark, and four clusters starting
        # together would stack theirs. A slow API server holds the others up for at most
        # RELIST_WAIT; then they list anyway.
        turn = _relists.acquire(timeout=RELIST_WAIT)
        try:
            items, rv = self._list_all()
        finally:
            if turn:
                _relists.release()
        with self._lock:
            self._items = items
        self.synced.set()
        self._changed.set()
        return rv

    def _list_all(self) -> tuple[dict[str, tuple[int, T]], str]:
        items: dict[str, tuple[int, T]] = {}
        rv = ""
        for page, rv in self._list_pages():  # noqa: B007 (last page's)
            self.requests += 1
            for node in page:
                items[sys.intern(self._key(node))] = (_rv(node), self.transform(node))
            del page  # (before the next page is fetched: one page alive at a time)
        return items, rv

    def run(self, stop: threading.Event) -> None:
        rv: str | None = None
        outage = _Outage(self.what, self.retry_delay)
        while not stop.is_set():
            try:
                if rv is None:
                    rv = self._relist()
                    outage.over()
                self.requests += 1
                for kind, obj in self._watch(rv):
                    outage.over()
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if kind != "BOOKMARK":
                        self._apply(kind, obj)
                    if stop.is_set():
                        return
            except Expired:
                log.info("%s watch expired (410); listing again", self.what)
                rv = None
            except FleetmedicError as exc:
                self.error = exc
                stop.wait(outage.failed(exc))

    # -- what is watched ----------------------------------------------------------------
    def _list_pages(self) -> Iterator[tuple[list[dict], str]]:
        raise NotImplementedError

    def _watch(self, rv: str) -> Iterator[tuple[str, dict]]:
        raise NotImplementedError

    @staticmethod
    def _key(obj: dict) -> str:
        return obj["metadata"]["name"]

    def _apply(self, kind: str, node: dict) -> None:
        name = sys.intern(self._key(node))
        if kind == "DELETED":
            with self._lock:
                self._items.pop(name, None)
            self._changed.set()
            return
        version = _rv(node)
        with self._lock:
            old = self._items.get(name)
        if old and old[0] > version:  # older than what we hold (a relist raced a watch)
            return
        try:
            kept = self.transform(node)  # outside the lock: readers never wait for it
        except Exception:  # one odd Node must never stop the watch
            log.exception("node %s: cannot read it; keeping what we had", name)
            return
        self._store(name, version, kept)

    def _store(self, name: str, version: int, kept: T) -> None:
        with self._lock:
            old = self._items.get(name)
            if old and old[0] > version:
                return
            self._items[name] = (version, kept)
        self._changed.set()

    def put(self, node: dict) -> T:
        """Record our own write at once, so the next decision sees it even before the
        watch event arrives; returns the kept form (the caller's view of its write)."""
        kept = self.transform(node)
        self._store(self._key(node), _rv(node), kept)
        return kept


class NodeWatcher(Informer[T]):
    """The Nodes of one cluster (matching ``label_selector``)."""

    what = "node"

    def __init__(
        self,
        cluster: Cluster,
        label_selector: str | None = None,
        watch_timeout: int = 300,
        retry_delay: float = 2.0,
        transform: Callable[[dict], T] = _keep,
    ) -> None:
        super().__init__(watch_timeout, retry_delay, transform)
        self.cluster, self.label_selector = cluster, label_selector

    def _list_pages(self) -> Iterator[tuple[list[dict], str]]:
        return self.cluster.list_node_pages(self.label_selector)

    def _watch(self, rv: str) -> Iterator[tuple[str, dict]]:
        return self.cluster.watch_nodes(rv, self.watch_timeout, self.label_selector)


def view_transform(cfg: Config) -> Callable[[dict], NodeView]:
    """What the informer keeps of each Node: its view, holding only the annotations the
    controller reads (its own and the configured BMC address one), not other tools'."""
    vocab, foreign = cfg.vocabulary(), cfg.foreign()
    keep = own_annotations(cfg.read_annotations())
    return lambda node: view_of(node, vocab, foreign, keep=keep)


class NodeFeed(Part):
    """The loop's informer as one of its parts (controller/parts.py): started with the
    loop, and the loop woken on every event."""

    name = "nodes"

    def __init__(self, watcher: NodeWatcher, wake: Callable[[], None]) -> None:
        self.watcher, self.wake = watcher, wake

    def start(self, stop: threading.Event) -> None:
        self.watcher.start(stop)
        logcontext.thread(self._relay, args=(stop,), name="fleetmedic-wake").start()

    def _relay(self, stop: threading.Event) -> None:
        while not stop.is_set():
            if self.watcher.wait_for_change(1.0):
                self.wake()


def _rv(node: dict) -> int:
    try:
        return int(node["metadata"].get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


def wait_synced(watcher: Informer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not watcher.synced.wait(0.2):
        if time.monotonic() > deadline:
            raise watcher.error or FleetmedicError(f"could not list nodes within {timeout:.0f}s")


class _Outage:
    """Back-off and logging while a watch cannot reach the API server (one line when the
    outage starts, when its cause changes and when it ends: :mod:`fleetmedic.backoff`)."""

    cap = 15.0
    """A retry is one cheap request; 15 s bounds how long the view stays stale after the
    server is back (a controller restart test brings the API server back within seconds)."""

    def __init__(self, what: str, delay: float) -> None:
        self.what, self.backoff = what, Backoff(delay, self.cap)

    def failed(self, exc: FleetmedicError) -> float:
        """Log what is news, and return how long to wait before the next try."""
        refused = isinstance(exc, PermanentError)
        # RBAC or a bad request will not heal by retrying fast: start that back-off higher.
        first = self.backoff.first * 5 if refused else None
        wait, news = self.backoff.failed(f"{type(exc).__name__}: {exc}", first)
        if news:
            log.log(
                logging.ERROR if refused else logging.WARNING,
                "%s watch: %s; retrying with back-off up to %.0fs",
                self.what,
                exc,
                self.cap,
            )
        return wait

    def over(self) -> None:
        took = self.backoff.over()
        if took is not None:
            log.info("%s watch: the API server answers again after %.0fs", self.what, took)
