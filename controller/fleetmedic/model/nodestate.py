"""The one place that says what state a Node is in.

Input is the Node as plain JSON (the API's own shape, a ``dict``); output is a
:class:`NodeView`. The inventory plugin, ``fleetmedic status`` and the
controller all call :func:`view`, so they can never disagree.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

from fleetmedic.model import keys
from fleetmedic.model.vocabulary import Vocabulary


@dataclasses.dataclass(frozen=True)
class ForeignSignal:
    """A signal from another tool that means "enter the ladder at reboot".

    ``kind`` is ``taint`` (match key and, if given, value) or ``condition``
    (match a NodeCondition ``type`` whose ``status`` equals ``value``).
    """

    kind: str
    key: str
    value: str | None = None

    def matches(self, node: Mapping[str, Any]) -> bool:
        if self.kind == "taint":
            return any(
                t.get("key") == self.key and (self.value is None or t.get("value") == self.value)
                for t in taints_of(node)
            )
        if self.kind == "condition":
            want = self.value or "True"
            return any(
                c.get("type") == self.key and c.get("status") == want
                for c in (node.get("status") or {}).get("conditions") or []
            )
        raise ValueError(f"unknown foreign signal kind {self.kind!r}")

    def describe(self) -> str:
        return f"{self.kind} {self.key}" + (f"={self.value}" if self.value is not None else "")


@dataclasses.dataclass(frozen=True, slots=True)  # slots: the controller keeps one per node
class NodeView:
    name: str
    state: str  # healthy | reboot | reimage | manual
    slow_network: bool
    vendor: str  # nvidia | amd | unknown
    address: str | None  # where to SSH
    unschedulable: bool
    foreign_signals: tuple[str, ...]  # descriptions of matching foreign signals
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    taints: tuple[Mapping[str, Any], ...]
    resource_version: str | None

    @property
    def in_repair(self) -> bool:
        return self.state != "healthy"

    def annotation_json(self, key: str, default: Any = None) -> Any:
        """Decode one of our JSON annotations; a malformed one reads as ``default``."""
        raw = self.annotations.get(key)
        if raw is None:
            return default
        try:
            return json.loads(raw)
        except ValueError:
            return default


def taints_of(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((node.get("spec") or {}).get("taints") or [])


def address_of(node: Mapping[str, Any]) -> str | None:
    """SSH address: the ssh-host annotation, else InternalIP, else None."""
    meta = node.get("metadata") or {}
    override = (meta.get("annotations") or {}).get(keys.ANN_SSH_HOST)
    if override:
        return override
    for addr in (node.get("status") or {}).get("addresses") or []:
        if addr.get("type") == "InternalIP":
            return addr.get("address")
    return None


def view(
    node: Mapping[str, Any], vocab: Vocabulary, foreign: Iterable[ForeignSignal] = ()
) -> NodeView:
    meta = node.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    taints = taints_of(node)
    vendor = labels.get(keys.LABEL_VENDOR, "unknown")
    return NodeView(
        name=meta["name"],
        state=vocab.repair_state_of(taints) or "healthy",
        slow_network=vocab.has_slow_network(taints),
        vendor=vendor if vendor in ("nvidia", "amd") else "unknown",
        address=address_of(node),
        unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
        foreign_signals=tuple(sig.describe() for sig in foreign if sig.matches(node)),
        labels=labels,
        annotations=dict(meta.get("annotations") or {}),
        taints=tuple(taints),
        resource_version=meta.get("resourceVersion"),
    )
