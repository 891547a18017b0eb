"""Pure edits on a Node dict, for use inside ``Cluster.update_node(name, mutate)``.

Each function edits the dict in place and returns True when it changed
something, so a mutate callback can return ``any([...])`` and skip no-op
writes. Taints are compared by (key, value, effect) so a foreign taint with
the same key but another value or effect is never touched.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleetmedic.model.vocabulary import TaintName


def _taints(node: dict) -> list[dict]:
    spec = node.setdefault("spec", {})
    if spec.get("taints") is None:
        spec["taints"] = []
    return spec["taints"]


def add_taint(node: dict, name: TaintName) -> bool:
    taints = _taints(node)
    if any(name.matches(t) for t in taints):
        return False
    taints.append(name.as_taint())
    return True


def remove_taint(node: dict, name: TaintName) -> bool:
    taints = _taints(node)
    kept = [t for t in taints if not name.matches(t)]
    if len(kept) == len(taints):
        return False
    taints[:] = kept
    return True


def remove_exact_taint(node: dict, taint: Mapping[str, Any]) -> bool:
    """Remove the taint with exactly this key, value and effect (another tool's)."""
    want = (taint.get("key"), taint.get("value") or "", taint.get("effect"))
    taints = _taints(node)
    kept = [t for t in taints if (t.get("key"), t.get("value") or "", t.get("effect")) != want]
    if len(kept) == len(taints):
        return False
    taints[:] = kept
    return True


def _meta_map(node: dict, field: str) -> dict:
    meta = node.setdefault("metadata", {})
    if meta.get(field) is None:
        meta[field] = {}
    return meta[field]


def set_annotation(node: dict, key: str, value: str | None) -> bool:
    """Set (or with ``None`` remove) an annotation."""
    return _set(_meta_map(node, "annotations"), key, value)


def set_label(node: dict, key: str, value: str | None) -> bool:
    return _set(_meta_map(node, "labels"), key, value)


def set_unschedulable(node: dict, value: bool) -> bool:
    spec = node.setdefault("spec", {})
    if bool(spec.get("unschedulable")) == value:
        return False
    spec["unschedulable"] = value
    return True


def _set(mapping: dict, key: str, value: str | None) -> bool:
    if value is None:
        return mapping.pop(key, None) is not None
    if mapping.get(key) == value:
        return False
    mapping[key] = value
    return True


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict:
    """JSON merge patch (RFC 7386) for the fields fleetmedic edits.

    Only labels, annotations, spec.taints and spec.unschedulable are
    compared. ``spec.taints`` is an atomic list, so the whole new list is sent;
    the caller guards it with a resourceVersion precondition.
    """
    patch: dict[str, Any] = {}
    for field in ("labels", "annotations"):
        before = (old.get("metadata") or {}).get(field) or {}
        after = (new.get("metadata") or {}).get(field) or {}
        diff = {k: after.get(k) for k in set(before) | set(after) if before.get(k) != after.get(k)}
        if diff:
            patch.setdefault("metadata", {})[field] = diff
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    if (old_spec.get("taints") or []) != (new_spec.get("taints") or []):
        patch.setdefault("spec", {})["taints"] = new_spec.get("taints") or None
    if bool(old_spec.get("unschedulable")) != bool(new_spec.get("unschedulable")):
        patch.setdefault("spec", {})["unschedulable"] = bool(new_spec.get("unschedulable")) or None
    return patch
