"""The domains' index over the views, kept from one cycle to the next (policy/domains.py's
review reads it): which nodes are in which domain, and which are fenced. Pure: views in."""

from __future__ import annotations

from collections.abc import Sequence

from fleetmedic.model.nodestate import NodeView


def fenced(v: NodeView) -> bool:
    """In repair, or flagged by another tool (as the breaker counts unhealthy)."""
    return v.state != "healthy" or bool(v.foreign_signals)


class Index:
    """What the review needs of the views, kept from one cycle to the next (as
    ``decide_all``'s memo): each node's view and domains, each domain's nodes, the fenced
    nodes. Views are compared by identity (the informer keeps a node's view object until
    its Node changes): a cycle where no Node changed costs one set of 5,000 ids, and only
    changed views are looked at. Without one, :func:`review` builds a fresh index (same
    result)."""

    def __init__(self, keys: Sequence[str]) -> None:
        self.keys = tuple(keys)
        self.seen: dict[str, tuple[NodeView, tuple[str | None, ...]]] = {}
        self.members: dict[str, dict[str, dict[str, None]]] = {k: {} for k in self.keys}
        self.fenced: dict[str, None] = {}
        # ids of the views in `seen`: they are alive (held there), so no new view can share
        # an id with one of them, and "not in here" means "a view not seen yet"
        self._ids: set[int] = set()
        self._order: list[int] = []

    def update(self, views: Sequence[NodeView]) -> None:
        order = list(map(id, views))
        if order == self._order:  # (the loop's views come sorted by name: same order)
            return
        self._order = order
        ids = set(order)
        new = ids - self._ids
        seen = self.seen
        for v in [v for v in views if id(v) in new]:
            old = seen.get(v.name)
            self._put(v, old[1] if old else None)
        if len(seen) > len(views):
            present = {v.name for v in views}
            for gone in [n for n in seen if n not in present]:
                self._drop(gone, seen.pop(gone)[1])
        self._ids = ids

    def _put(self, v: NodeView, before: tuple[str | None, ...] | None) -> None:
        values = tuple(v.labels.get(k) or None for k in self.keys)
        if before != values:
            if before is not None:
                self._drop(v.name, before)
            for key, value in zip(self.keys, values, strict=True):
                if value:
                    self.members[key].setdefault(value, {})[v.name] = None
        self.seen[v.name] = (v, values)
        if fenced(v):
            self.fenced[v.name] = None
        else:
            self.fenced.pop(v.name, None)

    def _drop(self, name: str, values: tuple[str | None, ...]) -> None:
        self.fenced.pop(name, None)
        for key, value in zip(self.keys, values, strict=True):
            domain = self.members[key].get(value) if value else None
            if domain is not None:
                domain.pop(name, None)
                if not domain:
                    del self.members[key][value]  # type: ignore[arg-type]

    def view(self, name: str) -> NodeView:
        return self.seen[name][0]
