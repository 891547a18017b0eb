"""The one place that says what state a Node is in.

Input is the Node as plain JSON (the API's own shape, a ``dict``); output is a
:class:`NodeView`. The inventory plugin, ``fleetmedic status`` and the
controller all call :func:`view`, so they can never disagree.

The controller keeps one view per Node of every cluster it serves, so a view holds
little: label keys and values and the name are interned (``sys.intern``: a fleet's
labels repeat the same few strings thousands of times, and the hostname label is the
name), and the controller's views keep only the annotations it reads (``keep``, see
:func:`own_annotations`), not every other tool's.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fleetmedic.model import keys
from fleetmedic.model.vocabulary import Vocabulary


@dataclasses.dataclass(frozen=True)
class Seen:
    """One foreign signal as it stands on a Node.

    ``fingerprint`` changes when the other tool sets the signal anew: a taint's value and
    ``timeAdded``, a condition's ``lastTransitionTime``. ``enters`` is the rung it asks for
    (None: it asks for nothing, e.g. the AWS suite's MONITOR severity).
    """

    describe: str
    tool: str
    fingerprint: str
    enters: str | None
    after_repair: str  # clear | wait-for-change
    taint: Mapping[str, Any] | None = None  # the matching taint (what `clear` removes)
    evidence: str | None = None  # what the tool said (e.g. the AWS suite's results)


@dataclasses.dataclass(frozen=True)
class ForeignSignal:
    """A signal from another tool that means "enter the ladder at ``enters``".

    ``kind`` is ``taint`` (match key and, if given, value), ``condition`` (match a
    NodeCondition ``type`` whose ``status`` equals ``value``; ``key`` may be a glob such as
    ``*``, then ``reason`` (a glob) narrows it: NVSentinel names a condition after each of
    its checks) or ``label`` (a label ``key`` whose value is one of ``values``, any if
    none). ``fingerprint_labels``: labels whose values tell a label signal set anew (the
    tool's timestamp label). ``after_repair`` says what happens to it once fleetmedic's
    repair passed verify: ``clear`` (remove exactly that taint) or ``wait-for-change`` (act
    again only when the tool sets it anew). ``severity_label``: a node label whose value
    picks the rung (``severity_rungs``; a value mapped to None enters nothing).
    """

    kind: str
    key: str
    value: str | None = None
    tool: str = ""
    enters: str = "reboot"
    after_repair: str = "wait-for-change"
    severity_label: str | None = None
    severity_rungs: tuple[tuple[str, str | None], ...] = ()
    evidence_annotation: str | None = None
    values: tuple[str, ...] = ()
    reason: str | None = None
    fingerprint_labels: tuple[str, ...] = ()

    def seen(self, node: Mapping[str, Any]) -> Seen | None:
        """This signal as it stands on ``node``, or None when the node does not carry it."""
        taint = None
        said: str | None = None
        if self.kind == "label":
            labels = (node.get("metadata") or {}).get("labels") or {}
            found = labels.get(self.key)
            if found is None or (self.values and found not in self.values):
                return None
            stamps = [str(labels.get(k) or "") for k in self.fingerprint_labels]
            fingerprint = "|".join((found, *stamps))
        elif self.kind == "condition" and _is_glob(self.key, self.reason):
            want = self.value or "True"
            conds = [
                c
                for c in (node.get("status") or {}).get("conditions") or []
                if c.get("status") == want
                and fnmatch.fnmatchcase(str(c.get("type") or ""), self.key)
                and fnmatch.fnmatchcase(str(c.get("reason") or ""), self.reason or "*")
            ]
            if not conds:
                return None
            conds.sort(key=lambda c: str(c.get("type")))
            fingerprint = ",".join(
                f"{c.get('type')}@{c.get('lastTransitionTime') or ''}" for c in conds
            )
            said = "; ".join(f"{c.get('type')}: {c.get('message') or ''}".strip() for c in conds)
        elif self.kind == "taint":
            taint = next(
                (
                    t
                    for t in taints_of(node)
                    if t.get("key") == self.key
                    and (self.value is None or t.get("value") == self.value)
                ),
                None,
            )
            if taint is None:
                return None
            fingerprint = f"{taint.get('value') or ''}|{taint.get('timeAdded') or ''}"
        elif self.kind == "condition":
            want = self.value or "True"
            cond = next(
                (
                    c
                    for c in (node.get("status") or {}).get("conditions") or []
                    if c.get("type") == self.key and c.get("status") == want
                ),
                None,
            )
            if cond is None:
                return None
            fingerprint = str(cond.get("lastTransitionTime") or "")
        else:
            raise ValueError(f"unknown foreign signal kind {self.kind!r}")
        meta = node.get("metadata") or {}
        enters: str | None = self.enters
        if self.severity_label:
            severity = (meta.get("labels") or {}).get(self.severity_label)
            if severity is not None:
                enters = dict(self.severity_rungs).get(severity, self.enters)
        evidence = said
        if self.evidence_annotation:
            evidence = (meta.get("annotations") or {}).get(self.evidence_annotation)
        return Seen(
            self.describe(),
            self.tool or self.key,
            fingerprint,
            enters,
            self.after_repair,
            dict(taint) if taint else None,
            evidence,
        )

    def matches(self, node: Mapping[str, Any]) -> bool:
        return self.seen(node) is not None

    def describe(self) -> str:
        if self.kind == "label":
            return f"label {self.key}" + (f" in ({','.join(self.values)})" if self.values else "")
        said = f"{self.kind} {self.key}" + (f"={self.value}" if self.value is not None else "")
        return said + (f" reason {self.reason}" if self.reason else "")


def _is_glob(key: str, reason: str | None) -> bool:
    return reason is not None or any(ch in key for ch in "*?[")


@dataclasses.dataclass(frozen=True, slots=True)  # slots: the controller keeps one per node
class NodeView:
    name: str
    state: str  # healthy | reboot | reimage | manual
    slow_network: bool
    vendor: str  # nvidia | amd | unknown
    address: str | None  # where to SSH
    unschedulable: bool
    foreign_signals: tuple[str, ...]  # descriptions of matching foreign signals
    foreign: tuple[Seen, ...]  # the same, with what the policy needs
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    taints: tuple[Mapping[str, Any], ...]
    resource_version: str | None
    condition: tuple[str, str] | None = None  # our NodeCondition as it stands: status, reason
    maintenance: bool = False  # a diagnostic sweep's taint is on it (policy/sweep.py)

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


def own_annotations(extra: Iterable[str] = ()) -> Callable[[str], bool]:
    """A ``keep`` for :func:`view`: fleetmedic's own annotations (``fleetmedic.io/``, the
    only ones the ladder, status and evidence read) and the ``extra`` keys (those config
    names, e.g. a BMC address annotation). A foreign signal's evidence annotation is read
    when the view is made (:attr:`Seen.evidence`), so it need not be kept."""
    wanted = frozenset(extra)
    return lambda key: key.startswith(keys.PREFIX) or key in wanted


def _interned(pairs: Mapping[str, Any]) -> dict[str, Any]:
    return {
        (sys.intern(k) if type(k) is str else k): (sys.intern(v) if type(v) is str else v)
        for k, v in pairs.items()
    }


def view(
    node: Mapping[str, Any],
    vocab: Vocabulary,
    foreign: Iterable[ForeignSignal] = (),
    *,
    keep: Callable[[str], bool] | None = None,
) -> NodeView:
    """The Node's view. ``keep``: which annotations the view holds (None: all of them)."""
    meta = node.get("metadata") or {}
    labels = _interned(meta.get("labels") or {})
    annotations = meta.get("annotations") or {}
    taints = taints_of(node)
    vendor = labels.get(keys.LABEL_VENDOR, "unknown")
    seen = tuple(s for s in (sig.seen(node) for sig in foreign) if s is not None)
    return NodeView(
        name=sys.intern(meta["name"]),
        state=vocab.repair_state_of(taints) or "healthy",
        slow_network=vocab.has_slow_network(taints),
        vendor=vendor if vendor in ("nvidia", "amd") else "unknown",
        address=address_of(node),
        unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
        foreign_signals=tuple(s.describe for s in seen),
        foreign=seen,
        labels=labels,
        annotations=(
            dict(annotations) if keep is None else {k: v for k, v in annotations.items() if keep(k)}
        ),
        taints=tuple(taints),
        resource_version=meta.get("resourceVersion"),
        condition=own_condition(node),
        maintenance=any(vocab.maintenance.matches(t) for t in taints),
    )


def own_condition(node: Mapping[str, Any]) -> tuple[str, str] | None:
    """(status, reason) of fleetmedic's NodeCondition on ``node``, or None."""
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == keys.CONDITION:
            return str(c.get("status", "")), str(c.get("reason", ""))
    return None
