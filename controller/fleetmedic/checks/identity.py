"""Each GPU's identity and RMA facts, read on the node (``fleetmedic gpus --json``).

- NVIDIA: NVML in the killable worker (``nvml_worker --identity``): serial and UUID, the
  board part number, InfoROM and VBIOS versions, retired pages and remapped rows, the
  volatile uncorrectable ECC count.
- AMD: ``amd-smi static`` (board serial, the ASIC's unique id, VBIOS), ``amd-smi list``
  (UUID), ``amd-smi metric --ecc --ecc-blocks`` (RAS counts per block) and ``amd-smi
  bad-pages``, all at once under one deadline.
- Both: this boot's GPU faults in the kernel log, as the scanner's catalog names them,
  each with the PCI address it names.

It only reads. A tool that fails or hangs is a line in ``problems``, never a GPU that
looks healthy: a lost GPU reads as ``lost`` (NVML) or is simply absent (amd-smi lists
the GPUs that answer), and the controller knows it by the PCI address it had before.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any

from fleetmedic.checks import amd, kernel, nvidia
from fleetmedic.checks import amd_parse as parse
from fleetmedic.checks.config import CheckConfig
from fleetmedic.checks.proc import Completed
from fleetmedic.model.gpufacts import MAX_FINDINGS, GpuFacts, GpuReport, LoggedFault
from fleetmedic.scan import ACTION_RANK
from fleetmedic.scan.stream import KMSG

AMD_JOBS = {
    "list": ("amd-smi", "list", "--json"),
    "static": ("amd-smi", "static", "--json"),
    "metric": ("amd-smi", "metric", "--ecc", "--ecc-blocks", "--json"),
    "bad_pages": ("amd-smi", "bad-pages", "--json"),
}
LOST_ERRORS = frozenset({"GPU_IS_LOST"})


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
    logged, said = kernel_faults(cfg.kernel.path or KMSG)
    problems += said
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

    errors = {str(x.get("error")) for x in r.values() if x.get("error")}
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
            "single_bit_ecc": value("retired_pages_sbe"),
            "double_bit_ecc": value("retired_pages_dbe"),
            "pending": value("retired_pages_pending"),
        },
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
