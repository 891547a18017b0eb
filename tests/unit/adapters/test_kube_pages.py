"""The kube adapter's paging (Kube._pages) without an API server: it follows ``continue``
and keeps no reference to a page it handed out, so a relist holds one page at a time.
Against a real API server: tests/integration/test_kube_adapter.py."""

from __future__ import annotations

import weakref
from typing import Any

from fleetmedic.adapters.kube import LIST_PAGE, Kube


class Page(list):
    """A page that can be watched for being freed (a plain list cannot be weakly referenced)."""


class Fake(Kube):
    def __init__(self, bodies: list[dict[str, Any]]) -> None:
        self.server, self.bodies, self.calls = "fake", bodies, []  # (no API client)

    def _call(self, what, method, path, query=None, **kwargs):
        # (what goes on the wire: Kube._send drops the query's None values)
        self.calls.append((method, path, {k: v for k, v in query.items() if v is not None}))
        return self.bodies.pop(0)


def body(names: list[str], token: str | None) -> dict[str, Any]:
    meta = {"resourceVersion": "42", **({"continue": token} if token else {})}
    return {"metadata": meta, "items": Page({"metadata": {"name": n}} for n in names)}


def test_pages_follow_continue_and_are_not_held_once_handed_out():
    kube = Fake([body(["a", "b"], "t1"), body(["c"], None)])
    pages = kube.list_node_pages("pool=x")
    page, rv = next(pages)
    assert [n["metadata"]["name"] for n in page] == ["a", "b"] and rv == "42"
    first = weakref.ref(page)
    del page
    assert first() is None, "the generator still holds the page it handed out"
    assert [[n["metadata"]["name"] for n in p] for p, _ in pages] == [["c"]]
    assert kube.calls == [
        ("GET", "/api/v1/nodes", {"limit": LIST_PAGE, "labelSelector": "pool=x"}),
        ("GET", "/api/v1/nodes", {"limit": LIST_PAGE, "labelSelector": "pool=x", "continue": "t1"}),
    ]
