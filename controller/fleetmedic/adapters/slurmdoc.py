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
  each write is decided on the node read right before it, with one single-node read
  (adapters/slurmread.py); against another writer the window is one scontrol round trip.
- **Reading only when needed** (``read_every`` > 0, the agent): the document last read or
  written is kept, in memory and, given ``cache_dir``, in a file shared by the node's agent
  processes (the daemon, the health check, the prolog). :meth:`get_node` answers from it
  while it is younger than ``read_every``, and :meth:`update_node` first applies the edit
  to it: an edit that changes nothing there is not written and costs no request at all
  (a healthy round). Any edit that would write is decided again on a fresh read, so no
  write is ever made on a kept document. What the agent knows without asking: every fence,
  record and raise it made itself (it keeps what it wrote). What it cannot know without
  asking is a drain someone else set since its last read (a human, the Loki source,
  ``fleetmedic quarantine``): it learns of it within ``read_every``; meanwhile a healthy
  round may run its GPU checks on a node someone fenced, and nothing more (it writes
  nothing unless a check fails, and then on a fresh read). A node someone else drained
  is kept as such for ``read_every`` too, so a failing check there does not ask every round.
- **Events:** Slurm has none; :meth:`post_event` does nothing (the reason and the record
  are what ``sinfo -R`` and ``scontrol show node`` show; the agent logs every fence).
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fleetmedic.adapters import slurmlib
from fleetmedic.adapters.slurm import ForeignDrain, Slurm, SlurmNode, check_node_name
from fleetmedic.adapters.slurmcache import NodeCache
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
    """:class:`~fleetmedic.adapters.nodedocs.NodeDocs` over one Slurm cluster (see the
    module doc for ``read_every`` and ``cache_dir``)."""

    def __init__(
        self,
        slurm: Slurm,
        vocab: Vocabulary,
        *,
        read_every: float = 0.0,
        cache_dir: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.slurm = slurm
        self.vocab = vocab
        self.server = f"slurmctld ({slurm.env.get('SLURM_CONF') or 'default slurm.conf'})"
        self._lock = threading.Lock()
        self.read_every = read_every
        self.cache = NodeCache(cache_dir, slurm.env.get("SLURM_CONF") or "", clock)

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
        check_node_name(name)
        kept = self.cache.get(name, self.read_every)
        if kept is not None:
            return copy.deepcopy(kept.doc)
        return self._fresh(name)[1]

    def _fresh(self, name: str) -> tuple[SlurmNode, dict]:
        """The node read now (one single-node read), its document kept."""
        node = self.slurm.node(name)
        doc = self.document(node)
        self.cache.put(name, doc, node.reason if foreign(node, self.slurm.prefix) else "")
        return node, doc

    # -- writing ----------------------------------------------------------------------
    def update_node(self, name: str, mutate: Callable[[dict], bool | None]) -> dict:
        check_node_name(name)
        with self._lock:
            kept = self.cache.get(name, self.read_every)
            if kept is not None:
                before = kept.doc
                after = copy.deepcopy(before)
                if mutate(after) is False or after == before:
                    return copy.deepcopy(before)  # nothing to write: nothing asked
                if kept.foreign:
                    raise ForeignDrain(_foreign_line(name, kept.foreign, ""))
            node, before = self._fresh(name)
            after = copy.deepcopy(before)
            if mutate(after) is False or after == before:
                return before
            if foreign(node, self.slurm.prefix):
                raise ForeignDrain(_foreign_line(name, node.reason, node.reason_user))
            rung, values = self._diff(name, before, after)
            if rung is not None:
                ann = after["metadata"].get("annotations") or {}
                finding = finding_of(ann, before["metadata"]["annotations"])
                self.slurm.fence(name, rung, finding, values or None, current=node)
            elif values:
                self.slurm.record(name, values, current=node)
            self.cache.put(name, after, "")
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


def _foreign_line(name: str, reason: str, user: str) -> str:
    return (
        f"Slurm node {name}: drained by someone else ({reason[:120]!r}, set by "
        f"{user or 'unknown'}): not touched, nothing recorded"
    )


def connect(
    conf: str | None,
    vocab: Vocabulary,
    *,
    prefix: str,
    timeout: float = 30.0,
    read_every: float = 0.0,
    cache_dir: Path | None = None,
    node_read: str = "sinfo",
) -> SlurmNodeDocs:
    """The Slurm cluster's nodes as the writers' node documents. One instance serves every
    writer of a process: it serializes their writes, as Slurm has no resourceVersion.
    ``node_read`` ``auto`` reads a node through the Slurm library the tools link, where
    one is found (adapters/slurmlib.py), else with ``sinfo -n``."""
    slurm = Slurm(conf, prefix=prefix, timeout=timeout)
    library = slurmlib.library_of() if node_read == "auto" else ""
    if library:
        slurm.use_reader(slurmlib.LibraryReader(library, slurm.env, timeout))
    return SlurmNodeDocs(slurm, vocab, read_every=read_every, cache_dir=cache_dir)
