"""A Slurm node as a Kubernetes-shaped node document, so the agent's writer (and its
policy, unchanged) fences through Slurm.

:meth:`SlurmNodeDocs.get_node` shows only what fleetmedic owns, in the shape the policy
edits; :meth:`SlurmNodeDocs.update_node` turns an edit's difference into **one**
``scontrol update`` through :class:`fleetmedic.adapters.slurm.Slurm`:

=====================================  =================================================
Node dict                              Slurm node
=====================================  =================================================
``metadata.name``                      the node name (checked, one node, argv element)
our repair taint for rung ``R``        DRAIN with reason ``fleetmedic: R: <finding>``
our other taints (slow-network, ...)   record key ``taints`` (JSON list) in Extra
``metadata.annotations``               the other record keys in Extra, same keys
=====================================  =================================================

- **The finding in the reason** is the evidence written in the same edit: the
  ``last-finding`` watermark when the edit sets it (a kernel-log finding: rule, GPU and
  message), else the categories ``last-results`` shows as failing (a strike fence). That
  is what the annotations hold on Kubernetes as the fence's evidence, so status and the
  reason cannot disagree.
- **Raising** a fence rewrites the reason (``state=drain`` on a node we drained already
  takes the new reason); Slurm has no softer taint, so slow-network is only recorded.
- **Refused** (:class:`NotMappable`, nothing written): removing or lowering our drain is
  not an edit here (an agent never resumes; the controller calls ``Slurm.unfence``), and
  so is any change to labels, other taints or other fields: Slurm has nothing to hold them.
- **Someone else's drain** (a reason without our prefix, or our prefix with a rung we do
  not know: an edited reason is theirs): the node is shown without a repair taint and
  every write is refused with :class:`~fleetmedic.adapters.slurm.ForeignDrain` before
  anything runs, so their reason and the node's Extra stay as they are.
- **Concurrency:** Slurm has no resourceVersion. Writes through one instance are
  serialized by a lock (the agent's kernel-log thread and its check loop share one), and
  each write re-reads the node right before it (``Slurm.fence`` checks ownership again);
  against another writer the window is one scontrol round trip.
- **Events:** Slurm has none; :meth:`post_event` does nothing (the reason and the record
  are what ``sinfo -R`` and ``scontrol show node`` show; the agent logs every fence).
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from fleetmedic.adapters.slurm import ForeignDrain, Slurm, SlurmNode, check_node_name
from fleetmedic.errors import PermanentError
from fleetmedic.model import keys
from fleetmedic.model.slurmreason import parse_reason
from fleetmedic.model.vocabulary import REPAIR_STATES, Vocabulary

RANK = {state: n for n, state in enumerate(REPAIR_STATES)}
NO_FINDING = "fleetmedic agent"
"""The finding of a fence whose edit wrote no evidence."""
TAINTS_KEY = "taints"
"""Record key of our taints that are not a repair rung (slow-network, maintenance)."""


class NotMappable(PermanentError):
    """An edit that has no Slurm counterpart: refused, nothing written."""


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def repair_of(node: SlurmNode, prefix: str) -> str | None:
    """The rung of our drain on ``node``, or None (no drain, or not ours)."""
    if not (node.drain or node.state == "down"):
        return None
    ours = parse_reason(node.reason, prefix)
    return ours.rung if ours else None


def foreign(node: SlurmNode, prefix: str) -> bool:
    """Someone else's reason is on the node: we write nothing there."""
    return bool(node.reason) and parse_reason(node.reason, prefix) is None


def finding_of(annotations: Mapping[str, str], before: Mapping[str, str]) -> str:
    """The evidence this edit wrote, as the finding of the reason (see the module doc)."""
    raw = annotations.get(keys.ANN_LAST_FINDING)
    if raw and raw != before.get(keys.ANN_LAST_FINDING):
        try:
            mark = json.loads(raw)
        except ValueError:
            mark = None
        if isinstance(mark, dict) and mark.get("rule"):
            where = f" {mark['pci']}" if mark.get("pci") else ""
            return f"{mark['rule']}{where}: {mark.get('msg') or ''}".rstrip(": ")
    try:
        results = json.loads(annotations.get(keys.ANN_LAST_RESULTS) or "{}")
    except ValueError:
        results = {}
    bad = [
        f"{cat} {entry.get('status')}: {entry.get('detail', '')}".rstrip(": ")
        for cat, entry in sorted(results.items() if isinstance(results, dict) else ())
        if isinstance(entry, dict) and entry.get("status") in ("problem", "unknown")
    ]
    return "; ".join(bad) or NO_FINDING


class SlurmNodeDocs:
    """:class:`~fleetmedic.adapters.nodedocs.NodeDocs` over one Slurm cluster."""

    def __init__(self, slurm: Slurm, vocab: Vocabulary) -> None:
        self.slurm = slurm
        self.vocab = vocab
        self.server = f"slurmctld ({slurm.env.get('SLURM_CONF') or 'default slurm.conf'})"
        self._lock = threading.Lock()

    # -- reading ----------------------------------------------------------------------
    def document(self, node: SlurmNode) -> dict:
        """``node`` as a Node dict holding only what fleetmedic owns."""
        rec = node.record
        try:
            taints = json.loads(rec.pop(TAINTS_KEY, "[]"))
        except ValueError:
            taints = []
        taints = [t for t in taints if isinstance(t, dict) and self._other_ours(t)]
        rung = repair_of(node, self.slurm.prefix)
        if rung is not None:
            taints.insert(0, self.vocab.repair(rung).as_taint())
        return {
            "metadata": {"name": node.name, "labels": {}, "annotations": rec},
            "spec": {"taints": taints},
        }

    def get_node(self, name: str) -> dict:
        return self.document(self.slurm.node(check_node_name(name)))

    # -- writing ----------------------------------------------------------------------
    def update_node(self, name: str, mutate: Callable[[dict], bool | None]) -> dict:
        check_node_name(name)
        with self._lock:
            node = self.slurm.node(name)
            before = self.document(node)
            after = copy.deepcopy(before)
            if mutate(after) is False or after == before:
                return before
            if foreign(node, self.slurm.prefix):
                raise ForeignDrain(
                    f"Slurm node {name}: drained by someone else "
                    f"({node.reason[:120]!r}, set by {node.reason_user or 'unknown'}): "
                    "not touched, nothing recorded"
                )
            rung, values = self._diff(name, before, after)
            if rung is not None:
                ann = after["metadata"].get("annotations") or {}
                finding = finding_of(ann, before["metadata"]["annotations"])
                self.slurm.fence(name, rung, finding, values or None)
            elif values:
                self.slurm.record(name, values)
            return after

    def post_event(
        self,
        node: dict,
        reason: str,
        message: str,
        type: str = "Normal",
        component: str = "fleetmedic",
    ) -> None:
        return None

    # -- the mapping ------------------------------------------------------------------
    def _other_ours(self, taint: Mapping[str, Any]) -> bool:
        """One of our taints that is not a repair rung (slow-network, maintenance)."""
        return self.vocab.is_ours(taint) and not any(
            self.vocab.repair(s).matches(taint) for s in REPAIR_STATES
        )

    def _diff(self, name: str, before: dict, after: dict) -> tuple[str | None, dict]:
        """The rung to drain at (None: the drain stays as it is) and the record values
        (None deletes a key) that turn ``before`` into ``after``; NotMappable otherwise."""
        meta_b, meta_a = before["metadata"], after.get("metadata") or {}
        rest_b = {k: v for k, v in before.items() if k not in ("metadata", "spec")}
        rest_a = {k: v for k, v in after.items() if k not in ("metadata", "spec")}
        spec_a = dict(after.get("spec") or {})
        taints_a = list(spec_a.pop("taints", None) or [])
        if (
            rest_a != rest_b
            or spec_a
            or (meta_a.get("labels") or {}) != meta_b["labels"]
            or {k for k in meta_a if k not in ("annotations", "labels")} - {"name"}
            or meta_a.get("name") != name
        ):
            raise NotMappable(
                f"Slurm node {name}: only our taints and annotations map onto Slurm; "
                "this edit changes something else (nothing written)"
            )
        strange = [t for t in taints_a if not self.vocab.is_ours(t)]
        if strange:
            raise NotMappable(
                f"Slurm node {name}: taint {strange[0].get('key')!r} is not ours; Slurm "
                "has nothing to hold it (nothing written)"
            )
        rung_b = self.vocab.repair_state_of(before["spec"]["taints"])
        rung_a = self.vocab.repair_state_of(taints_a)
        if rung_b is not None and (rung_a is None or RANK[rung_a] < RANK[rung_b]):
            raise NotMappable(
                f"Slurm node {name}: removing or lowering our drain ({rung_b}) is not an "
                "edit (an agent never resumes a node; nothing written)"
            )
        ann_b = meta_b["annotations"]
        ann_a = {str(k): v for k, v in (meta_a.get("annotations") or {}).items()}
        if TAINTS_KEY in ann_a:
            raise NotMappable(f"Slurm node {name}: annotation {TAINTS_KEY!r} is reserved")
        values: dict[str, str | None] = {
            k: v for k, v in ann_a.items() if ann_b.get(k) != v and isinstance(v, str)
        }
        values.update({k: None for k in ann_b if k not in ann_a})
        others_b = [t for t in before["spec"]["taints"] if self._other_ours(t)]
        others_a = [t for t in taints_a if self._other_ours(t)]
        if others_a != others_b:
            values[TAINTS_KEY] = _dumps(others_a) if others_a else None
        return (rung_a if rung_a != rung_b else None), values


def connect(
    conf: str | None, vocab: Vocabulary, *, prefix: str, timeout: float = 30.0
) -> SlurmNodeDocs:
    """The Slurm cluster's nodes as the writers' node documents. One instance serves every
    writer of a process: it serializes their writes, as Slurm has no resourceVersion."""
    return SlurmNodeDocs(Slurm(conf, prefix=prefix, timeout=timeout), vocab)
