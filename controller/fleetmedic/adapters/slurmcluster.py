"""A Slurm cluster behind the controller's cluster interface (adapters/cluster.py).

The agent's node documents (:class:`~fleetmedic.adapters.slurmdoc.SlurmNodeDocs`: our
drain is the repair taint, the record in Extra is the annotations) widened with what the
controller's loop needs:

- **Reading** is one ``sinfo --json`` (slurmctld's node-info and partition-info RPCs, at
  any node count) narrowed to ``partitions``. Slurm has no watch, so
  :meth:`SlurmCluster.watch_nodes` reads again every ``poll_interval`` and yields the
  nodes whose document changed: the loop's informer (controller/watcher.py) runs on it
  unchanged. Each read and each write gets a resourceVersion from one counter, taken when
  the read *starts*, so a read that raced one of our writes never replaces the written
  document in the informer's cache (it keeps the higher one).
- **Documents** add to the agent's: ``status.addresses`` (the node's NodeAddr, where
  Ansible connects), the ``fleetmedic.io/state`` label mirror, a label per partition
  (``partition.slurm.fleetmedic.io/<name>: "true"``, for profile selectors and executor
  routes), ``fleetmedic.io/gpu-vendor`` (from the agent's record, the GPU GRES type or the
  features: model/gpuvendor.py; the reinstall phase picks the driver or ROCm by it),
  ``fleetmedic.io/scheduler-returns-nodes: "true"`` when slurmctld runs with
  ``ReturnToService=2`` (read with ``scontrol show config`` at each full listing; the
  ladder tells Slurm's own return to service from a person's resume by it) and, on a node
  someone else drained, ``fleetmedic.io/slurm-owner`` (``foreign_nhc`` and the other
  owners of model/slurmowner.py). These labels are derived, never written.
- **One node** (a write, a step's wait) is read with the single-node read of
  adapters/slurmread.py; only the poll reads the whole cluster. The boot time, which 22.05's
  single-node read does not show, comes from the last poll (:meth:`SlurmCluster.boot_time`).
- **Writing** (:meth:`SlurmCluster.update_node`) is the agent's mapping plus the two edits
  only the controller makes: a lower rung rewrites our reason, and removing our repair
  taint resumes the node (``state=resume``, with the record in the same update) only
  while the reason is still ours. Someone else's drain refuses every write, as for the
  agent: never touched, never resumed.
- **Leases and ConfigMaps** go to ``store`` (a file store under the cluster's
  ``state_dir``, or any :class:`~fleetmedic.adapters.cluster.Store`).
- **Events** become log lines and JSON lines in ``events`` (a file beside the store),
  which ``fleetmedic status NODE`` reads back as the node's timeline.
- Pods: a Slurm node runs jobs, not pods; the drain waits for jobs
  (kinds/slurmdrain.py). The pod calls list nothing, and evicting or deleting a pod
  or a node is refused in one line.
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from fleetmedic.adapters import slurmsave
from fleetmedic.adapters.cluster import Store
from fleetmedic.adapters.slurm import ForeignDrain, Slurm, SlurmNode, check_node_name
from fleetmedic.adapters.slurmdoc import NO_FINDING, SlurmNodeDocs, finding_of, foreign
from fleetmedic.errors import NotFoundError, PermanentError, TemporaryError
from fleetmedic.model import gpuvendor, keys
from fleetmedic.model.slurmowner import Owner, owner
from fleetmedic.model.slurmreason import parse_reason
from fleetmedic.model.vocabulary import Vocabulary

log = logging.getLogger(__name__)

PARTITION_LABEL = "partition.slurm.fleetmedic.io/"
OWNER_LABEL = keys.LABEL_SLURM_OWNER
UNKNOWN = "unknown"
"""A restarted slurmctld shows its nodes UNKNOWN (boot time 0, and once no reason at all)
until their slurmd registers again (measured, 22.05). Such a node is not judged: the watch
keeps its last document and writes to it wait (TemporaryError), so a drain of ours that
slurmctld has not shown again yet is never taken for no drain."""
EVENTS_KEPT = 5000
"""Lines of the events file kept when it is rewritten (about 1 MB): the recent history of
every node, as the API server keeps Events for an hour."""


class SlurmCluster(SlurmNodeDocs):
    def __init__(
        self,
        slurm: Slurm,
        vocab: Vocabulary,
        store: Store,
        *,
        partitions: tuple[str, ...] = (),
        poll_interval: float = 30.0,
        events: Path | None = None,
        state_save_location: Path | None = None,
    ) -> None:
        super().__init__(slurm, vocab)
        self.state_save_location = state_save_location  # None: as slurmctld says
        self._saves: slurmsave.SaveCheck | None = None
        self.store = store
        self.partitions = tuple(partitions)
        self.poll_interval = poll_interval
        self.events = events
        self._versions = itertools.count(1)
        self._seen: dict[str, dict] = {}  # last document of each node, for watch_nodes
        self._events_lock = threading.Lock()
        self.reads = 0  # sinfo calls made, for the idle-cost benchmark
        self._polled: dict[str, SlurmNode] = {}  # the last full read, for boot times
        self.returns_to_service: bool | None = None  # ReturnToService=2 (None: not read)

    # -- documents --------------------------------------------------------------------
    def _version(self) -> str:
        return str(next(self._versions))

    def node_document(self, node: SlurmNode, version: str) -> dict:
        doc = self.document(node)
        who = owner(node.reason, self.slurm.prefix)
        if who == Owner.OURS and parse_reason(node.reason, self.slurm.prefix) is None:
            who = Owner.FOREIGN  # our prefix, edited after it: theirs now
        return self._dressed(doc, node, version, who)

    def _dressed(self, doc: dict, node: SlurmNode, version: str, who: Owner = Owner.NONE) -> dict:
        """``doc`` with what this adapter derives: labels, the address, the version."""
        rung = self.vocab.repair_state_of(doc["spec"]["taints"])
        labels = {f"{PARTITION_LABEL}{p}": "true" for p in node.partitions}
        labels[keys.LABEL_STATE] = rung or "healthy"
        vendor = gpuvendor.vendor(node.record.get(gpuvendor.RECORD_KEY), node.gres, node.features)
        if vendor != gpuvendor.UNKNOWN:
            labels[keys.LABEL_VENDOR] = vendor
        if self.returns_to_service:
            labels[keys.LABEL_SCHEDULER_RETURNS] = "true"
        if who.foreign:
            labels[OWNER_LABEL] = who.value
        doc["metadata"]["labels"] = labels
        doc["metadata"]["resourceVersion"] = version
        if node.address:
            doc["status"] = {"addresses": [{"type": "InternalIP", "address": node.address}]}
        return doc

    def _read(self) -> tuple[dict[str, dict], str]:
        version = self._version()  # (before the read: see the module doc)
        self.reads += 1
        nodes = self.slurm.nodes(self.partitions or None)
        self._polled = {n.name: n for n in nodes}
        docs = {n.name: self.node_document(n, version) for n in nodes}
        for n in nodes:
            if n.state == UNKNOWN and n.name in self._seen:
                docs[n.name] = self._seen[n.name]  # (see UNKNOWN)
        return docs, version

    def _one(self, name: str) -> SlurmNode:
        node = self.slurm.node(check_node_name(name))
        if self.partitions and not set(self.partitions) & set(node.partitions):
            raise NotFoundError(
                f"Slurm node {name}: not in the managed partitions ({', '.join(self.partitions)})"
            )
        return node

    def get_node(self, name: str) -> dict:
        version = self._version()
        return self.node_document(self._one(name), version)

    def boot_time(self, name: str) -> int | None:
        """``name``'s boot time as the last poll saw it (None: not seen yet)."""
        node = self._polled.get(name)
        return node.boot_time if node else None

    def read_config(self) -> None:
        """ReturnToService from slurmctld (one RPC); on a failure the last value stays."""
        try:
            rts = self.slurm.config().get("ReturnToService")
        except (TemporaryError, PermanentError) as exc:
            log.warning("could not read slurmctld's ReturnToService: %s", exc)
            return
        self.returns_to_service = rts == "2"

    def list_nodes(self, label_selector: str | None = None) -> tuple[list[dict], str]:
        self.read_config()
        docs, version = self._read()
        self._seen = docs
        return [docs[n] for n in sorted(docs)], version

    def list_node_pages(
        self, label_selector: str | None = None, page_size: int = 500
    ) -> Iterator[tuple[list[dict], str]]:
        """One page: ``sinfo --json`` answers the whole cluster at once (2,000 nodes are
        about 4 MB)."""
        yield self.list_nodes(label_selector)

    def watch_nodes(
        self, resource_version: str, timeout: int = 300, label_selector: str | None = None
    ) -> Iterator[tuple[str, dict]]:
        """Read every ``poll_interval`` until ``timeout`` and yield ``(type, document)`` for
        each node that appeared (ADDED), changed (MODIFIED) or left (DELETED)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(self.poll_interval, left))
            docs, _ = self._read()
            before, self._seen = self._seen, docs
            for name in sorted(docs):
                old = before.get(name)
                if old is None:
                    yield "ADDED", docs[name]
                elif _unversioned(old) != _unversioned(docs[name]):
                    yield "MODIFIED", docs[name]
            for name in sorted(set(before) - set(docs)):
                yield "DELETED", before[name]

    # -- writing ----------------------------------------------------------------------
    def update_node(self, name: str, mutate: Callable[[dict], bool | None]) -> dict:
        """The difference of ``mutate``'s edit as one Slurm update (see the module doc)."""
        with self._lock:
            node = self._one(name)
            if node.state == UNKNOWN:
                raise TemporaryError(
                    f"Slurm node {name}: slurmctld does not know its state yet (restarted?); "
                    "nothing written, trying again later",
                    delay=5,
                )
            before = self.node_document(node, self._version())
            after = copy.deepcopy(before)
            if mutate(after) is False or _unversioned(after) == _unversioned(before):
                return before
            if foreign(node, self.slurm.prefix):
                raise ForeignDrain(
                    f"Slurm node {name}: drained by someone else "
                    f"({node.reason[:120]!r}, set by {node.reason_user or 'unknown'}): "
                    "not touched, nothing recorded"
                )
            plain_b, plain_a = _plain(before), _plain(after, derived=before)
            rung_b = self.vocab.repair_state_of(plain_b["spec"]["taints"])
            rung_a = self.vocab.repair_state_of(plain_a["spec"]["taints"])
            if rung_b is not None and rung_a is None:
                # resume: the one edit the agent's mapping refuses; the rest maps as there
                plain_a["spec"]["taints"].insert(0, self.vocab.repair(rung_b).as_taint())
                _, values = self._diff(name, plain_b, plain_a)
                if not self.slurm.unfence(name, record=values or None, current=node):
                    raise PermanentError(f"Slurm node {name}: not drained, nothing to resume")
            else:
                new_rung: str | None
                if rung_b is not None and rung_a is not None and rung_a != rung_b:
                    # a lower rung (the agent's mapping refuses it) rewrites the reason too
                    plain_b["spec"]["taints"][0] = self.vocab.repair(rung_a).as_taint()
                    _, values = self._diff(name, plain_b, plain_a)
                    new_rung = rung_a
                else:
                    new_rung, values = self._diff(name, plain_b, plain_a)
                if new_rung is not None:
                    ann = plain_a["metadata"].get("annotations") or {}
                    finding = finding_of(ann, before["metadata"]["annotations"])
                    kept = parse_reason(node.reason, self.slurm.prefix)
                    if finding == NO_FINDING and kept:  # a climb: the evidence stays the same
                        finding = kept.finding
                    elif finding == NO_FINDING:  # fenced again (Slurm's own return): the
                        finding = finding_of(ann, {})  # evidence the record keeps
                    self.slurm.fence(name, new_rung, finding, values or None, current=node)
                elif values:
                    self.slurm.record(name, values, current=node)
            # the document as written, without reading the cluster again (a full sinfo)
            return self._dressed(_plain(after, derived=before), node, self._version())

    def wait_saved(self, name: str, written: float, cancel: threading.Event) -> bool:
        """Return once slurmctld has saved ``name``'s record as it stands (True), or on
        ``cancel`` (False); adapters/slurmsave.py says how, and what happens where this
        bastion cannot read slurmctld's state files (the record's age against the save
        window, ``written`` being when it was written)."""
        if self._saves is None:
            where = self.state_save_location or self.slurm.config().get("StateSaveLocation")
            self._saves = slurmsave.SaveCheck.at(where)
            if not self._saves.usable:
                log.warning(
                    "cannot see what slurmctld has saved (%s): a disruptive phase waits %gs "
                    "after its record instead",
                    self._saves.why_not,
                    slurmsave.SAVE_WINDOW_S,
                )
        extra = self._one(name).extra if self._saves.usable else ""
        if extra and not self._saves.saved(extra):
            log.info("%s: waiting for slurmctld to save the record before acting", name)
        return slurmsave.wait(self._saves, lambda: extra, written, cancel)

    def set_node_condition(self, name: str, condition: dict) -> dict:
        """Slurm nodes have no conditions: the reason and the record say it all."""
        return {}

    def delete_node(self, name: str, uid: str) -> bool:
        raise PermanentError(f"Slurm node {name}: the replace rung is not supported on Slurm")

    # -- events -----------------------------------------------------------------------
    def post_event(
        self,
        node: dict,
        reason: str,
        message: str,
        type: str = "Normal",
        component: str = "fleetmedic",
    ) -> None:
        """A log line, and a JSON line in ``events`` (best effort: never raises)."""
        name = (node.get("metadata") or {}).get("name", "")
        log.log(
            logging.WARNING if type == "Warning" else logging.INFO,
            "event %s on %s: %s",
            reason,
            name,
            message,
        )
        if self.events is None:
            return
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        line = {
            "involvedObject": {"kind": "Node", "name": name},
            "reason": reason,
            "message": message[:1024],
            "type": type,
            "source": {"component": component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            with self._events_lock:
                self.events.parent.mkdir(parents=True, exist_ok=True)
                with self.events.open("a") as f:
                    f.write(json.dumps(line, separators=(",", ":")) + "\n")
                if self.events.stat().st_size > EVENTS_KEPT * 400:
                    kept = self.events.read_text().splitlines()[-EVENTS_KEPT:]
                    tmp = self.events.with_suffix(".tmp")
                    tmp.write_text("\n".join(kept) + "\n")
                    tmp.replace(self.events)
        except OSError as exc:
            log.warning("could not record event %s on %s: %s", reason, name, exc)

    def list_node_events(self, name: str) -> list[dict]:
        if self.events is None or not self.events.exists():
            return []
        found = []
        for raw in self.events.read_text(errors="replace").splitlines():
            try:
                ev = json.loads(raw)
            except ValueError:
                continue  # (a line cut by a crash)
            if isinstance(ev, dict) and (ev.get("involvedObject") or {}).get("name") == name:
                found.append(ev)
        return found

    # -- leases and config maps: the store --------------------------------------------
    def get_lease(self, namespace: str, name: str) -> dict:
        return self.store.get_lease(namespace, name)

    def create_lease(self, namespace: str, body: dict) -> dict:
        return self.store.create_lease(namespace, body)

    def replace_lease(self, namespace: str, body: dict) -> dict:
        return self.store.replace_lease(namespace, body)

    def get_config_map(self, namespace: str, name: str) -> dict | None:
        return self.store.get_config_map(namespace, name)

    def patch_config_map_data(
        self,
        namespace: str,
        name: str,
        data: dict[str, str | None],
        resource_version: str | None = None,
    ) -> dict:
        return self.store.patch_config_map_data(namespace, name, data, resource_version)

    # -- pods: none on a Slurm node ---------------------------------------------------
    def list_pods_on_node(self, node_name: str) -> tuple[list[dict], str]:
        return [], ""

    def watch_pods_on_node(
        self, node_name: str, resource_version: str, timeout: int
    ) -> Iterator[tuple[str, dict]]:
        return iter(())

    def list_pod_pages(
        self, field_selector: str, page_size: int = 500
    ) -> Iterator[tuple[list[dict], str]]:
        return iter([([], "")])

    def watch_pods(
        self, field_selector: str, resource_version: str, timeout: int = 300
    ) -> Iterator[tuple[str, dict]]:
        return iter(())

    def evict_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        raise PermanentError("a Slurm node runs jobs, not pods: nothing to evict")

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        raise PermanentError("a Slurm node runs jobs, not pods: nothing to delete")


def _unversioned(doc: dict) -> dict:
    meta = {k: v for k, v in (doc.get("metadata") or {}).items() if k != "resourceVersion"}
    return {**doc, "metadata": meta}


def _plain(doc: dict, derived: dict | None = None) -> dict:
    """``doc`` as the agent's mapping knows it: without what this adapter derives (labels,
    addresses, the version). An edit of a derived label is refused, except the state
    mirror, which follows the taint."""
    meta = dict(doc.get("metadata") or {})
    labels = {k: v for k, v in (meta.pop("labels", None) or {}).items() if k != keys.LABEL_STATE}
    if derived is not None:
        was = {
            k: v
            for k, v in ((derived.get("metadata") or {}).get("labels") or {}).items()
            if k != keys.LABEL_STATE
        }
        if labels != was:
            raise PermanentError(
                f"Slurm node {meta.get('name')}: labels are derived from Slurm (partitions, "
                "owner) and cannot be written (nothing written)"
            )
    meta.pop("resourceVersion", None)
    meta["labels"] = {}
    out = {k: copy.deepcopy(v) for k, v in doc.items() if k not in ("metadata", "status")}
    out["metadata"] = copy.deepcopy(meta)
    out.setdefault("spec", {}).setdefault("taints", [])
    return out
