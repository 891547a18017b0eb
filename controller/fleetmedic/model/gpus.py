"""Each GPU by its identity, and the faults it had, across episodes, reboots and nodes.

A node's GPUs are known by what the diagnose phase reads on it (`fleetmedic gpus --json`:
NVML's serial and UUID on NVIDIA, amd-smi's board serial and the ASIC's unique id on AMD)
and by their PCI address. An *incident* is one episode's finding held against one GPU:
its identity, the fault family (data/lemon_rules.yaml), the episode, when, and on which
node.

Where it is kept, and why there:

- **On the node** (:data:`~fleetmedic.model.keys.ANN_GPUS`, a :class:`NodeRecord`): the
  GPUs as last read and this node's incidents, where the node's other records live (a
  Node annotation on Kubernetes, one key of the Extra record on Slurm). It survives
  reboots and reimages (the Node object and slurmctld's record do), controller restarts
  (the controller keeps nothing) and a GPU that falls off the bus (its serial is the one
  last read at its PCI address). It is bounded (:data:`NODE_RECORD_BYTES`: every
  annotation of a Node shares 256 KiB, and Slurm's Extra is one line in slurmctld's
  state), oldest incidents first out.
- **In the controller's store** (:class:`FleetHistory`, one key of the pause ConfigMap on
  Kubernetes, of the file store on Slurm): every GPU's incidents by identity, whichever
  node it was in. A node that is renamed, replaced or deleted takes its annotation with
  it; a GPU moved to another node is the same GPU there. Bounded too
  (:data:`FLEET_BYTES`), the GPUs with the oldest last incident first out.

Both are merged by :func:`merge`: an incident is the same one when its GPU, node and
episode and family are, so writing one twice (a controller killed between the two
writes) never counts it twice.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

NODE_RECORD_BYTES = 3072
"""A node's record: 8 GPUs' identities (~900 bytes) and a dozen incidents (~1.8 KB). Small
enough for Slurm's Extra beside the repair record, where slurmctld keeps it on one line."""
FLEET_BYTES = 256 * 1024
"""The store's share of its ConfigMap (1 MiB in all, shared with the breaker, domains and
replacements records): about 1,500 incidents, far more than a fleet's lemons in a year."""
MAX_TEXT = 80
"""Characters kept of an incident's "why" (the finding it was held for)."""


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def identity_key(serial: str, uid: str) -> str:
    """How a GPU is known across nodes: its unique id (NVIDIA's UUID, AMD's ASIC id) when
    read, else its serial; "" when neither is known (then it is not remembered)."""
    return uid or serial


@dataclasses.dataclass(frozen=True)
class Gpu:
    """One GPU as the node last showed it."""

    index: int
    pci: str  # dddd:bb:dd.f, lower case
    serial: str = ""
    uid: str = ""  # NVIDIA: UUID; AMD: the unique id (ASIC serial)
    model: str = ""
    seen: str = ""  # when its identity was last read (RFC 3339)

    @property
    def key(self) -> str:
        return identity_key(self.serial, self.uid)

    def label(self) -> str:
        """``GPU 1 (SN 1652...)``: how a person names it in a sentence."""
        sn = self.serial or self.uid
        return f"GPU {self.index}" + (f" (SN {sn})" if sn else "")

    def to_json(self) -> dict[str, Any]:
        data = {"i": self.index, "pci": self.pci, "sn": self.serial, "uid": self.uid}
        data.update({"model": self.model, "seen": self.seen})
        return {k: v for k, v in data.items() if v not in ("", None)}

    @classmethod
    def from_json(cls, data: Any) -> Gpu | None:
        if not isinstance(data, Mapping):
            return None
        try:
            return cls(
                index=int(data["i"]),
                pci=str(data.get("pci", "")),
                serial=str(data.get("sn", "")),
                uid=str(data.get("uid", "")),
                model=str(data.get("model", "")),
                seen=str(data.get("seen", "")),
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclasses.dataclass(frozen=True)
class Incident:
    """One episode's fault held against one GPU."""

    serial: str
    uid: str
    family: str  # data/lemon_rules.yaml (or "other")
    node: str
    ep: int
    at: str  # RFC 3339: when the diagnose phase found it
    why: str = ""  # the finding, short: "xid.79 on 0000:28:00.0"
    index: int | None = None  # its place on that node then
    pci: str = ""  # its PCI address then, when known
    back: str = ""  # when the episode's repair returned the node to service ("" not yet)

    @property
    def key(self) -> str:
        return identity_key(self.serial, self.uid)

    @property
    def pending(self) -> bool:
        """Held against a GPU whose identity was not known yet (it fell off the bus before
        any read of it): only on its node's record, until a later read names it (adopt)."""
        return not self.key

    @property
    def same(self) -> tuple[str, str, int, str]:
        """What makes two records one incident (written twice after a restart)."""
        where = self.key or f"{pci_key(self.pci)}#{self.index}"
        return (where, self.node, self.ep, self.family)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "sn": self.serial,
            "uid": self.uid,
            "fam": self.family,
            "node": self.node,
            "ep": self.ep,
            "at": self.at,
            "why": self.why[:MAX_TEXT],
            "i": self.index,
            "pci": self.pci,
            "back": self.back,
        }
        return {k: v for k, v in data.items() if v not in ("", None)}

    @classmethod
    def from_json(cls, data: Any) -> Incident | None:
        if not isinstance(data, Mapping):
            return None
        try:
            inc = cls(
                serial=str(data.get("sn", "")),
                uid=str(data.get("uid", "")),
                family=str(data["fam"]),
                node=str(data["node"]),
                ep=int(data["ep"]),
                at=str(data["at"]),
                why=str(data.get("why", ""))[:MAX_TEXT],
                index=int(data["i"]) if data.get("i") is not None else None,
                pci=str(data.get("pci", "")),
                back=str(data.get("back", "")),
            )
        except (KeyError, TypeError, ValueError):
            return None
        return inc if inc.key or inc.pci or inc.index is not None else None


def merge(*groups: Iterable[Incident]) -> list[Incident]:
    """Every incident of ``groups`` once, oldest first: the first record of each wins,
    but a later one that knows when the repair held (``back``) completes it."""
    seen: dict[tuple[str, str, int, str], Incident] = {}
    for group in groups:
        for inc in group:
            had = seen.get(inc.same)
            if had is None:
                seen[inc.same] = inc
            elif inc.back and not had.back:
                seen[inc.same] = dataclasses.replace(had, back=inc.back)
    return sorted(seen.values(), key=lambda i: (i.at, i.node, i.ep, i.key))


@dataclasses.dataclass(frozen=True)
class NodeRecord:
    """The ``fleetmedic.io/gpus`` record of one node."""

    gpus: tuple[Gpu, ...] = ()
    incidents: tuple[Incident, ...] = ()

    def gpu_at(self, pci: str) -> Gpu | None:
        want = pci_key(pci)
        return next((g for g in self.gpus if want and pci_key(g.pci) == want), None)

    def gpu_index(self, index: int) -> Gpu | None:
        return next((g for g in self.gpus if g.index == index), None)

    def returned(self, node: str, ep: int, at: str) -> NodeRecord:
        """Episode ``ep``'s incidents marked back in service at ``at`` (its verify passed):
        how long a repair held is counted from there (policy/lemon.py's chain)."""
        incs = tuple(
            dataclasses.replace(i, back=at) if i.node == node and i.ep == ep and not i.back else i
            for i in self.incidents
        )
        return dataclasses.replace(self, incidents=incs)

    def adopt(self) -> NodeRecord:
        """Pending incidents named by the GPU now known at their PCI address (else index).
        Known gap: a GPU swapped for another between the fault and the read would take
        the fault of the one it replaced (the read after the repair comes first, normally
        minutes later: the verify)."""
        out = []
        for inc in self.incidents:
            gpu = None
            if inc.pending:
                gpu = self.gpu_at(inc.pci) if inc.pci else None
                if gpu is None and inc.index is not None:
                    gpu = self.gpu_index(inc.index)
            if gpu is not None and gpu.key:
                inc = dataclasses.replace(inc, serial=gpu.serial, uid=gpu.uid, index=gpu.index)
            out.append(inc)
        return dataclasses.replace(self, incidents=tuple(merge(out)))

    def encode(self, limit: int = NODE_RECORD_BYTES) -> str:
        """Compact JSON of at most ``limit`` bytes: the oldest incidents go first, then (a
        node with very many GPUs) the GPUs beyond what fits."""
        incidents = list(self.incidents)
        gpus = list(self.gpus)
        while True:
            text = compact(
                {"gpus": [g.to_json() for g in gpus], "inc": [i.to_json() for i in incidents]}
            )
            if len(text.encode()) <= limit or not (incidents or gpus):
                return text
            if incidents:
                incidents.pop(0)
            else:
                gpus.pop()

    @classmethod
    def decode(cls, raw: str | None) -> NodeRecord:
        """The record; missing or malformed parts read as empty (never fail a node)."""
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            data = {}
        if not isinstance(data, Mapping):
            data = {}
        gpus = [g for g in (Gpu.from_json(x) for x in _list(data.get("gpus"))) if g]
        incs = [i for i in (Incident.from_json(x) for x in _list(data.get("inc"))) if i]
        return cls(tuple(gpus), tuple(merge(incs)))


class FleetHistory:
    """Every remembered GPU's incidents, by identity (the controller's store)."""

    def __init__(self, incidents: Iterable[Incident] = ()) -> None:
        self.by_key: dict[str, list[Incident]] = {}
        for inc in merge(i for i in incidents if not i.pending):  # (named GPUs only)
            self.by_key.setdefault(inc.key, []).append(inc)

    def of(self, key: str) -> list[Incident]:
        return list(self.by_key.get(key, ()))

    def all(self) -> list[Incident]:
        return merge(*self.by_key.values())

    def with_(self, incidents: Iterable[Incident]) -> FleetHistory:
        return FleetHistory([*self.all(), *incidents])

    def pruned(self, since: str) -> FleetHistory:
        """Without incidents older than ``since`` (RFC 3339: they sort as times)."""
        return FleetHistory(i for i in self.all() if i.at >= since)

    def encode(self, limit: int = FLEET_BYTES) -> str:
        """Compact JSON, ``{key: [incident, ...]}``, at most ``limit`` bytes: the GPUs whose
        last incident is oldest go first."""
        keys = sorted(self.by_key, key=lambda k: self.by_key[k][-1].at, reverse=True)
        body = {k: [i.to_json() for i in self.by_key[k]] for k in keys}
        text = compact(body)
        while len(text.encode()) > limit and keys:
            body.pop(keys.pop())
            text = compact(body)
        return text

    @classmethod
    def decode(cls, raw: str | None) -> FleetHistory:
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            data = {}
        if not isinstance(data, Mapping):
            return cls()
        found = [Incident.from_json(x) for v in data.values() for x in _list(v)]
        return cls(i for i in found if i is not None)


def pci_key(pci: str | None) -> str:
    """``dddd:bb:dd`` of a PCI address in any of the forms tools print (NVML's
    ``00000000:28:00.0``, the kernel's ``0000:28:00.0``, an Xid's ``0000:28:00``)."""
    if not pci:
        return ""
    text = pci.strip().lower().removeprefix("pci:")
    parts = text.split(":")
    if len(parts) < 3:
        return ""
    domain, bus, dev = parts[-3], parts[-2], parts[-1].split(".")[0]
    try:
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}"
    except ValueError:
        return ""


def _list(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list) else ()
