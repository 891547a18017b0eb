"""Each GPU's identity and RMA facts, read on the node (``fleetmedic gpus --json``).

- NVIDIA: NVML in the killable worker (``nvml_worker --identity``): serial and UUID, the
  board part number, InfoROM and VBIOS versions, retired pages and remapped rows, the
  volatile uncorrectable ECC count.
- AMD: ``amd-smi static`` (board serial, the ASIC's unique id, VBIOS), ``amd-smi list``
  (UUID), ``amd-smi metric --ecc --ecc-blocks`` (RAS counts per block) and ``amd-smi
  bad-pages``, all at once under one deadline.
- Both: this boot's GPU faults in the kernel log, as the scanner's catalog names them,
  each with the PCI address it names. The NVIDIA driver names a GPU before its first Xid
  of a boot ("NVRM: GPU at PCI:0000:00:05: GPU-efbd...", then "NVRM: GPU Board Serial
  Number: 1650423013443", as in akash-network/support issue 244's dmesg): a GPU that no
  longer answers NVML keeps its identity from there.

It only reads. A tool that fails or hangs is a line in ``problems``, never a GPU that
looks healthy: a lost GPU reads as ``lost`` (NVML) or is simply absent (amd-smi lists
the GPUs that answer), and the controller knows it by the PCI address it had before.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import stat
from collections.abc import Mapping
from typing import Any

from fleetmedic.checks import amd, kernel, nvidia
from fleetmedic.checks import amd_parse as parse
from fleetmedic.checks.config import CheckConfig
from fleetmedic.checks.proc import Completed
from fleetmedic.model.gpufacts import MAX_FINDINGS, GpuFacts, GpuReport, LoggedFault
from fleetmedic.model.gpus import pci_key
from fleetmedic.scan import ACTION_RANK, last_boot_offset, read_kmsg
from fleetmedic.scan.stream import KMSG

AMD_JOBS = {
    "list": ("amd-smi", "list", "--json"),
    "static": ("amd-smi", "static", "--json"),
    "metric": ("amd-smi", "metric", "--ecc", "--ecc-blocks", "--json"),
    "bad_pages": ("amd-smi", "bad-pages", "--json"),
}
LOST_ERRORS = frozenset({"GPU_IS_LOST"})
NOT_ERRORS = frozenset({"NOT_SUPPORTED", "FUNCTION_NOT_FOUND"})
"""NVML's way of saying a reading does not apply to this GPU (checks/nvidia_rules.py)."""


def report(cfg: CheckConfig, env: Mapping[str, str] | None = None) -> GpuReport:
    """What this node's GPUs say about themselves now (never raises for a tool's fault)."""
    vendor = cfg.vendor
    problems: list[str] = []
    gpus: tuple[GpuFacts, ...] = ()
    node: dict[str, Any] = {"host": socket.gethostname()}
    if vendor in ("nvidia", "auto"):
        snap = nvidia.collect(cfg.timeout, env, identity=True)
        if vendor == "nvidia" or not nvidia.library_missing(snap):
            vendor = "nvidia"
            gpus, said = from_nvml(snap)
            problems += said
            node["driver_version"] = (snap.system.get("driver_version") or {}).get("value")
    if vendor in ("amd", "auto"):
        vendor = "amd"
        runs, _tools = amd.collect_jobs(AMD_JOBS, cfg.timeout, env)
        gpus, said = from_amd(runs)
        problems += said
    path = cfg.kernel.path or KMSG
    logged, said = kernel_faults(path)
    problems += said
    if vendor == "nvidia":
        gpus = named_by_the_driver(gpus, kernel_identities(path))
    return GpuReport(vendor, gpus, logged, tuple(problems), node)


# -- NVIDIA ----------------------------------------------------------------------------
def from_nvml(snap: nvidia.Snapshot) -> tuple[tuple[GpuFacts, ...], list[str]]:
    problems = [snap.failure] if snap.failure else []
    count = (snap.system.get("count") or {}).get("value")
    if count is None:
        err = snap.system.get("count") or snap.system.get("init") or {}
        problems.append(f"NVML could not count the GPUs: {err.get('error', 'no answer')}")
    indices = sorted(set(snap.gpus) | set(range(count if isinstance(count, int) else 0)))
    return tuple(_nvml_gpu(i, snap.gpus.get(i) or {}) for i in indices), problems


def _nvml_gpu(i: int, r: Mapping[str, Mapping[str, Any]]) -> GpuFacts:
    def value(op: str) -> Any:
        return (r.get(op) or {}).get("value")

    errors = {str(x.get("error")) for x in r.values() if x.get("error")} - NOT_ERRORS
    signals = []
    if errors & LOST_ERRORS or not r:
        signals.append("lost")
    ecc = value("ecc_volatile_uncorrected")
    if isinstance(ecc, int) and ecc > 0:
        signals.append("ecc_uncorrected")
    rows = value("remapped_rows") or {}
    if isinstance(rows, Mapping) and rows.get("failure"):
        signals.append("row_remap_failure")
    rma = {
        "board_part_number": value("board_part_number"),
        "inforom_image_version": value("inforom_image_version"),
        "vbios_version": value("vbios_version"),
        "ecc_volatile_uncorrected": ecc,
        "retired_pages": {
            k: v
            for k, v in (
                ("single_bit_ecc", value("retired_pages_sbe")),
                ("double_bit_ecc", value("retired_pages_dbe")),
                ("pending", value("retired_pages_pending")),
            )
            if v is not None
        }
        or None,
        "remapped_rows": rows or None,
        "recovery_action": value("recovery_action"),
        "errors": sorted(errors) or None,
    }
    return GpuFacts(
        index=i,
        pci=normal_pci(value("pci_bus_id")),
        serial=str(value("serial") or ""),
        uid=str(value("uuid") or ""),
        model=str(value("name") or ""),
        signals=tuple(signals),
        rma={k: v for k, v in rma.items() if v is not None},
    )


def normal_pci(bus_id: Any) -> str:
    """NVML's ``00000000:28:00.0`` as the kernel writes it: ``0000:28:00.0``."""
    text = str(bus_id or "").strip().lower()
    parts = text.split(":")
    if len(parts) == 3 and len(parts[0]) > 4:
        parts[0] = parts[0][-4:]
    return ":".join(parts)


# -- AMD -------------------------------------------------------------------------------
def from_amd(runs: Mapping[str, Completed]) -> tuple[tuple[GpuFacts, ...], list[str]]:
    problems: list[str] = []
    parsed: dict[str, dict[int, dict[str, Any]]] = {}
    for job, argv in AMD_JOBS.items():
        run = runs.get(job)
        if run is None:
            problems.append(f"{' '.join(argv)}: not run (amd-smi not installed?)")
            continue
        if not run.ok:
            problems.append(run.describe())
            continue
        try:
            parsed[job] = parse.gpu_entries(run.stdout)
        except parse.ParseError as exc:
            problems.append(f"{' '.join(argv)}: {exc}")
    indices = sorted(set().union(*(set(p) for p in parsed.values())) if parsed else set())
    return tuple(_amd_gpu(i, {j: p.get(i) or {} for j, p in parsed.items()}) for i in indices), (
        problems
    )


def _amd_gpu(i: int, e: Mapping[str, Mapping[str, Any]]) -> GpuFacts:
    static, listed = e.get("static") or {}, e.get("list") or {}
    metric, bad = e.get("metric") or {}, e.get("bad_pages") or {}
    asic, board, bus = (static.get(k) or {} for k in ("asic", "board", "bus"))
    raw_ecc = metric.get("ecc")
    ecc: Mapping[str, Any] = raw_ecc if isinstance(raw_ecc, Mapping) else {}
    signals = []
    unc = parse.num(ecc.get("total_uncorrectable_count"))
    if unc:
        signals.append("ecc_uncorrected")
    unreservable = parse.page_count(bad.get("un_res"))
    if unreservable:
        signals.append("bad_pages_unreservable")
    rma = {
        "uuid": listed.get("uuid"),
        "vbios": static.get("vbios"),
        "board": {k: board.get(k) for k in ("model_number", "product_name", "fru_id")},
        "ecc": dict(ecc) or None,
        "ras_blocks": metric.get("ecc_blocks"),
        "bad_pages": {k: parse.page_count(bad.get(k)) for k in ("retired", "pending", "un_res")},
        "driver": static.get("driver"),
    }
    return GpuFacts(
        index=i,
        pci=str(bus.get("bdf") or listed.get("bdf") or "").lower(),
        serial=str(board.get("product_serial") or ""),
        uid=str(asic.get("asic_serial") or ""),
        model=str(asic.get("market_name") or ""),
        signals=tuple(signals),
        rma={k: v for k, v in rma.items() if v not in (None, {}, "N/A")},
    )


# -- the kernel log --------------------------------------------------------------------
GPU_AT = re.compile(
    r"NVRM: GPU at PCI:([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}): (GPU-[0-9a-fA-F-]+)"
)
BOARD_SERIAL = re.compile(r"NVRM: GPU Board Serial Number: (\S+)")


def kernel_identities(path: str) -> dict[str, tuple[str, str]]:
    """{PCI address (dddd:bb:dd): (UUID, board serial)} the driver printed this boot."""
    try:
        lines = _current_boot_lines(path)
    except OSError:
        return {}
    out: dict[str, tuple[str, str]] = {}
    last: str | None = None
    for line in lines:
        m = GPU_AT.search(line)
        if m:
            last = pci_key(m.group(1))
            out[last] = (m.group(2), out.get(last, ("", ""))[1])
            continue
        m = BOARD_SERIAL.search(line)
        if m and last:
            out[last] = (out[last][0], m.group(1))
            last = None
    return out


def _current_boot_lines(path: str) -> list[str]:
    if stat.S_ISCHR(os.stat(path).st_mode):
        return [r for r in read_kmsg(path) if "NVRM: GPU" in r]
    with open(path, "rb") as handle:
        handle.seek(last_boot_offset(handle) or 0)
        return [line.decode("utf-8", "replace") for line in handle if b"NVRM: GPU " in line]


def named_by_the_driver(
    gpus: tuple[GpuFacts, ...], named: Mapping[str, tuple[str, str]]
) -> tuple[GpuFacts, ...]:
    """A GPU NVML cannot name (lost) named by what the driver printed at its address; a
    lost GPU's address is not known to NVML either, so one the driver named that NVML no
    longer shows takes the place of the lost GPU (when it is the only such one)."""
    if not named:
        return gpus
    answered = {pci_key(g.pci) for g in gpus if g.pci}
    spare = [p for p in named if p not in answered]
    lost = [g for g in gpus if not (g.serial or g.uid)]
    out = []
    for g in gpus:
        if g.serial or g.uid:
            out.append(g)
            continue
        pci = pci_key(g.pci) if g.pci else (spare[0] if len(spare) == 1 and len(lost) == 1 else "")
        uuid, serial = named.get(pci, ("", ""))
        out.append(dataclasses.replace(g, uid=uuid, serial=serial, pci=g.pci or _full(pci)))
    return tuple(out)


def _full(pci: str) -> str:
    return f"{pci}.0" if pci else ""


def kernel_faults(path: str) -> tuple[tuple[LoggedFault, ...], list[str]]:
    """This boot's GPU faults that call for more than monitoring, the worst first."""
    try:
        findings, _ = kernel.scan_current_boot(path)
    except OSError as exc:
        return (), [f"cannot read kernel log {path}: {exc.strerror or exc}"]
    findings.sort(key=lambda f: -ACTION_RANK[f.action])
    out = [
        LoggedFault(f.rule or f"{f.kind}.{f.code}", f.pci or "", f.message)
        for f in findings
        if f.action not in ("none",)
    ]
    return tuple(out[:MAX_FINDINGS]), []
