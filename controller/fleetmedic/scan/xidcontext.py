"""Where and after what an Xid happened: the context NVIDIA's Xid workflows decide on.

NVIDIA's catalog sends Xid 13, 31 and 45 to workflows (WORKFLOW_XID_13 / _31 / _45)
that look at the fault's *place* and *company*, not at how often it comes:

- Xid 13 (graphics engine exception) names the SM it hit::

      Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter
      Graphics SM Global Exception on (GPC 7, TPC 7, SM 0): Multiple Warp Errors
      Graphics TEX Exception on (GPC 0, TPC 1): TEX NACK / Page Fault
      Graphics Exception: ESR 0x57c730=0xc04000b ...       (no place: part of the same event)

- Xid 31 (MMU fault) names the channel, the faulting engine and client, and the type::

      Ch 0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC2 GPCCLIENT_T1_7
        faulted @ 0x2b57_b3000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE
      channel 0x00000002, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_0 ...
      Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_14 faulted @ ...
      Ch 00000003, engmask 00000101, intr 10000000          (older drivers: channel only)

- Xid 43 / 45 name the channel (``Ch 0000000b``, ``channel 0x00000015``), and a newer
  Xid 45 the Xid it cleans up after (``Ch 00000001 caused by previous Xid 149``).
- an amdgpu page fault names its VMID and PASID, and the process (on the line, or on the
  next line, which the scanner attaches to the finding as its ``process``)::

      [gfxhub] page fault (src_id:0 ring:173 vmid:8 pasid:32791, for process python3 pid 15615 ...

:func:`context_of` reads these from a finding's message, which the parser has already
freed of every log prefix the scanner reads (dmesg, ``dmesg -T``, journal, syslog,
/dev/kmsg, ...), so one function serves every format. It never raises; what a line does
not say is ``None``.

The workflows themselves (which context decides, how many repeats, which action) are
data: the ``workflows`` section of ``data/xid_catalog.yaml``, read by
:func:`load_workflows`; the evaluators are :mod:`fleetmedic.policy.workflow`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from fleetmedic.errors import ConfigError
from fleetmedic.model.actions import ACTIONS
from fleetmedic.scan import catalog, regexcache
from fleetmedic.scan.catalogfiles import read_files

_SM = regexcache.compile(r"\(GPC (\d{1,3})(?:, TPC (\d{1,3}))?(?:, SM (\d{1,3}))?\)")
_MMU = regexcache.compile(
    r"MMU Fault: ENGINE (?P<engine>[A-Z][A-Z0-9_]*)(?: GPC(?P<gpc>\d{1,3}))?"
    r"(?: (?P<client>[A-Z][A-Z0-9_]*))?\s+faulted @"
)
_FAULT_TYPE = regexcache.compile(r"Fault is of type (FAULT_[A-Z0-9_]+)")
_CHANNEL = regexcache.compile(
    r"\b(?:Ch(?:annel)?(?: ID)?|ChId|channel)\s+(?:0x)?(?P<ch>[0-9a-fA-F]{1,8})\b"
)
_CAUSE = regexcache.compile(r"caused by previous Xid (\d{1,6})")
_VMID = regexcache.compile(r"\bvmid[: ]\s*(\d+)")
_PASID = regexcache.compile(r"\bpas_?id[: ]\s*(\d+)")
_FAULT_PROCESS = regexcache.compile(r"for process (\S+) pid \d+")

WORKFLOW_KINDS = ("same-location", "same-gpu", "follows", "spread")
"""The kinds of context a workflow decides on (one evaluator each in policy/workflow.py)."""


@dataclasses.dataclass(frozen=True, slots=True)
class XidContext:
    """What one Xid line says about where it happened (``None``: not said)."""

    gpc: int | None = None
    tpc: int | None = None
    sm: int | None = None
    engine: str | None = None  # Xid 31: the faulting engine (GRAPHICS, CE3, ...)
    client: str | None = None  # Xid 31: the MMU client (GPCCLIENT_T1_7, ...)
    fault_type: str | None = None  # Xid 31: FAULT_PDE, FAULT_PTE, ...
    channel: int | None = None
    cause: int | None = None  # Xid 45: the Xid it says it follows
    vmid: int | None = None  # amdgpu page fault: the VM id (0: the kernel's own)
    pasid: int | None = None  # amdgpu page fault: the process address space id
    process: str | None = None  # amdgpu page fault: the faulting process's name

    def location(self, fields: tuple[str, ...]) -> str | None:
        """``fields`` as ``"gpc=7,tpc=7"``, or ``None`` if the line lacks any of them."""
        values = [getattr(self, f) for f in fields]
        if any(v is None for v in values):
            return None
        return ",".join(f"{f}={v}" for f, v in zip(fields, values, strict=True))


def context_of(message: str) -> XidContext:
    """The context in an Xid finding's message (the text after code, pid and name)."""
    gpc = tpc = sm = None
    engine = client = fault_type = None
    hit = _SM.search(message)
    if hit is not None:
        gpc, tpc, sm = (int(g) if g is not None else None for g in hit.groups())
    mmu = _MMU.search(message)
    if mmu is not None:
        engine, client = mmu.group("engine"), mmu.group("client")
        if mmu.group("gpc") is not None:
            gpc = int(mmu.group("gpc"))
        kind = _FAULT_TYPE.search(message, mmu.end())
        fault_type = kind.group(1) if kind else None
    ch = _CHANNEL.search(message)
    cause = _CAUSE.search(message)
    vmid, pasid, proc = (
        _VMID.search(message),
        _PASID.search(message),
        _FAULT_PROCESS.search(message),
    )
    return XidContext(
        gpc=gpc,
        tpc=tpc,
        sm=sm,
        engine=engine,
        client=client,
        fault_type=fault_type,
        channel=int(ch.group("ch"), 16) if ch else None,
        cause=int(cause.group(1)) if cause else None,
        vmid=int(vmid.group(1)) if vmid else None,
        pasid=int(pasid.group(1)) if pasid else None,
        process=proc.group(1) if proc else None,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class WorkflowSpec:
    """One ``workflows`` entry of the Xid catalog (see the catalog for each field's why).

    - ``kind``: which context decides (:data:`WORKFLOW_KINDS`);
    - ``count`` / ``window`` / ``burst``: ``count`` distinct events within ``window``
      seconds (lines closer than ``burst`` seconds at the same place are one event);
    - ``where``: the context fields that make "the same place" (same-location);
    - ``action``: what the context calls for when it says hardware; ``otherwise``: when
      it does not (different places, across GPUs, solo);
    - ``within``: (follows) an Xid this many seconds before on the same GPU is the one
      this line follows; (spread) a fault this soon after a rule of ``after`` on the same
      GPU (a reset) calls for ``action`` at once;
    - ``after``: (spread) the rules (GPU resets) whose aftermath a fault is.
    """

    rule: str
    kind: str
    action: str
    otherwise: str
    bucket: str
    count: int = 2
    window: float = 86400.0
    burst: float = 10.0
    where: tuple[str, ...] = ()
    within: float = 10.0
    sources: tuple[str, ...] = ()
    after: tuple[str, ...] = ()


_FIELDS = {f.name for f in dataclasses.fields(XidContext)}
_KEYS = {"kind", "action", "otherwise", "bucket", "count", "window", "burst", "where"}
_KEYS |= {"within", "source", "why", "after"}


def parse_workflows(where: str, raw: Any, sources: Mapping[str, Any]) -> dict[str, WorkflowSpec]:
    """The ``workflows`` section, validated; a :class:`ConfigError` (one line) if bad."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: `workflows` must map rule ids to workflows")
    out: dict[str, WorkflowSpec] = {}
    for rule, entry in raw.items():
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where}: workflow {rule!r} must be a mapping")
        unknown = set(entry) - _KEYS
        if unknown:
            raise ConfigError(f"{where}: workflow {rule!r} has unknown key {sorted(unknown)[0]!r}")
        kind = entry.get("kind")
        if kind not in WORKFLOW_KINDS:
            kinds = ", ".join(WORKFLOW_KINDS)
            raise ConfigError(f"{where}: workflow {rule!r} kind {kind!r} must be one of {kinds}")
        for key in ("action", "otherwise"):
            if entry.get(key) not in ACTIONS:
                raise ConfigError(
                    f"{where}: workflow {rule!r} {key} {entry.get(key)!r} "
                    f"must be one of {', '.join(ACTIONS)}"
                )
        fields = tuple(str(f) for f in entry.get("where") or ())
        bad = [f for f in fields if f not in _FIELDS]
        if bad or (kind in ("same-location", "spread") and not fields):
            raise ConfigError(
                f"{where}: workflow {rule!r} needs `where` from {', '.join(sorted(_FIELDS))}"
            )
        names = entry.get("source")
        names = (names,) if isinstance(names, str) else tuple(names or ())
        if not names or any(n not in sources for n in names):
            raise ConfigError(f"{where}: workflow {rule!r} needs a `source` listed in `sources`")
        try:
            spec = WorkflowSpec(
                rule=str(rule),
                kind=str(kind),
                action=str(entry["action"]),
                otherwise=str(entry["otherwise"]),
                bucket=str(entry.get("bucket", "")),
                count=int(entry.get("count", 2)),
                window=float(entry.get("window", 86400)),
                burst=float(entry.get("burst", 10)),
                where=fields,
                within=float(entry.get("within", 10)),
                sources=names,
                after=tuple(str(r) for r in entry.get("after") or ()),
            )
        except (TypeError, ValueError):
            raise ConfigError(
                f"{where}: workflow {rule!r} needs numbers for count/window/burst/within"
            ) from None
        if spec.count < 1 or spec.window <= 0 or spec.burst < 0 or spec.within < 0:
            raise ConfigError(
                f"{where}: workflow {rule!r} needs count >= 1, window > 0, burst/within >= 0"
            )
        out[spec.rule] = spec
    return out


WORKFLOW_FILES = ("xid_catalog.yaml", "amdgpu_catalog.yaml")


@cache
def load_workflows(directory: str | None = None) -> dict[str, WorkflowSpec]:
    """The catalogs' ``workflows`` (Xid 13/31/45, amdgpu page faults), from
    ``fleetmedic/data`` unless ``directory``. The packaged catalog is read as
    :func:`fleetmedic.scan.catalog.load` reads it, all its files at once, so both share one
    kept parse (:mod:`.catalogcache`) and an agent's start-up parses no YAML."""
    names = WORKFLOW_FILES if directory else catalog.PACKAGED
    read = read_files(Path(directory) if directory else None, names)
    out: dict[str, WorkflowSpec] = {}
    for name in WORKFLOW_FILES:
        data = read[name]
        if not isinstance(data, Mapping):
            raise ConfigError(f"fault catalog {name}: is not a mapping")
        out.update(
            parse_workflows(
                f"fault catalog {name}", data.get("workflows"), data.get("sources") or {}
            )
        )
    return out
