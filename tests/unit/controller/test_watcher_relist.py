"""The informer's relist (controller/watcher.py) without an API server: one relist at a
time in the process (every cluster's watchers share the turn), bounded by RELIST_WAIT, and
one page alive at a time. Its list/watch loop against a real API server is in
tests/integration/test_kube_adapter.py."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import Any, cast

import pytest

from fleetmedic.adapters.kube import Kube
from fleetmedic.controller import watcher as watchermod
from fleetmedic.controller.watcher import NodeWatcher


class Page(list):
    """A page that can be watched for being freed (a plain list cannot be weakly referenced)."""


def node(name: str, rv: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(rv)}}


class Gated(NodeWatcher[dict]):
    """A watcher whose list waits on ``gate`` after its first page, saying when it started."""

    def __init__(self, names: list[str], gate: threading.Event | None = None) -> None:
        super().__init__(cast(Kube, None))
        self.names, self.gate = names, gate
        self.listing = threading.Event()

    def _list_pages(self) -> Iterator[tuple[list[dict], str]]:
        self.listing.set()
        for i, name in enumerate(self.names):
            if i and self.gate is not None:
                assert self.gate.wait(10)
            yield [node(name)], "9"


def relist_in_thread(w: NodeWatcher) -> threading.Thread:
    t = threading.Thread(target=w._relist, daemon=True)
    t.start()
    return t


def test_a_relist_waits_for_another_clusters_to_end():
    gate = threading.Event()
    first, second = Gated(["a1", "a2"], gate), Gated(["b1"])
    t1 = relist_in_thread(first)
    assert first.listing.wait(5)
    t2 = relist_in_thread(second)
    assert not second.listing.wait(0.3), "the second relist started while the first listed"
    gate.set()
    t1.join(5)
    t2.join(5)
    assert second.listing.is_set()
    assert set(first.snapshot()) == {"a1", "a2"} and set(second.snapshot()) == {"b1"}


def test_a_slow_relist_holds_the_others_up_for_relist_wait_only(monkeypatch):
    monkeypatch.setattr(watchermod, "RELIST_WAIT", 0.2)
    gate = threading.Event()
    stuck, other = Gated(["a1", "a2"], gate), Gated(["b1"])
    t1 = relist_in_thread(stuck)
    assert stuck.listing.wait(5)
    t2 = relist_in_thread(other)
    t2.join(5)
    assert set(other.snapshot()) == {"b1"} and other.synced.is_set()
    gate.set()
    t1.join(5)
    # the turn is free again: a later relist does not wait RELIST_WAIT
    monkeypatch.setattr(watchermod, "RELIST_WAIT", 30)
    again = Gated(["c1"])
    relist_in_thread(again).join(5)
    assert again.synced.is_set()


def test_a_failed_relist_gives_the_turn_back():
    class Failing(NodeWatcher[dict]):
        def _list_pages(self):
            raise watchermod.FleetmedicError("API server unreachable")

    with pytest.raises(watchermod.FleetmedicError):
        Failing(cast(Kube, None))._relist()
    w = Gated(["n1"])
    w._relist()
    assert set(w.snapshot()) == {"n1"}


def test_a_page_is_freed_before_the_next_is_fetched():
    freed: list[bool] = []

    class Paged(NodeWatcher[dict]):
        def _list_pages(self):
            previous = None
            for i in range(3):
                if previous is not None:
                    freed.append(previous() is None)
                page = Page([node(f"n{i}")])
                previous = weakref.ref(page)
                yield page, "9"
                del page

    w = Paged(cast(Kube, None), transform=lambda n: n["metadata"]["name"])
    w._relist()
    assert freed == [True, True]
    assert w.snapshot() == {"n0": "n0", "n1": "n1", "n2": "n2"}
