"""How NVML readings become check results: pure functions over a Snapshot.

Error returns are data too. ``NotSupported`` (and a symbol the driver lacks)
means *not applicable*: the check is ``ok`` with ``applicable: false``, never
a problem. A GPU fault (``GPU_IS_LOST``...) is reported once, as a problem of
``nvidia.driver``; the per-metric checks call that GPU unreadable (unknown).
Anything else (``TIMEOUT``, ``NO_PERMISSION``, a call that never returned)
is ``unknown``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fleetmedic.checks.base import CheckResult, ok, problem, unknown
from fleetmedic.checks.config import CheckConfig
from fleetmedic.checks.verdicts import Verdict, count_result, fold

# worker op -> the NVML entry point behind it, for "which call hung" evidence
NVML_CALLS = {
    "init": "nvmlInitWithFlags",
    "driver_version": "nvmlSystemGetDriverVersion",
    "count": "nvmlDeviceGetCount_v2",
    "handle": "nvmlDeviceGetHandleByIndex_v2",
    "name": "nvmlDeviceGetName",
    "uuid": "nvmlDeviceGetUUID",
    "pci_bus_id": "nvmlDeviceGetPciInfo_v3",
    "ecc_volatile_uncorrected": "nvmlDeviceGetTotalEccErrors",
    "retired_pages_pending": "nvmlDeviceGetRetiredPagesPendingStatus",
    "retired_pages_sbe": "nvmlDeviceGetRetiredPages_v2",
    "retired_pages_dbe": "nvmlDeviceGetRetiredPages_v2",
    "remapped_rows": "nvmlDeviceGetRemappedRows",
    "recovery_action": "nvmlDeviceGetFieldValues(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)",
    "pcie_gen": "nvmlDeviceGetCurrPcieLinkGeneration",
    "pcie_max_gen": "nvmlDeviceGetMaxPcieLinkGeneration",
    "pcie_width": "nvmlDeviceGetCurrPcieLinkWidth",
    "pcie_max_width": "nvmlDeviceGetMaxPcieLinkWidth",
    "nvlink": "nvmlDeviceGetNvLinkState",
    "clocks_event_reasons": "nvmlDeviceGetCurrentClocksEventReasons",
    "persistence_mode": "nvmlDeviceGetPersistenceMode",
    "memory_total": "nvmlDeviceGetMemoryInfo",
    # read only for `fleetmedic gpus` (nvml_worker --identity)
    "serial": "nvmlDeviceGetSerial",
    "board_part_number": "nvmlDeviceGetBoardPartNumber",
    "inforom_image_version": "nvmlDeviceGetInforomImageVersion",
    "vbios_version": "nvmlDeviceGetVbiosVersion",
}

NOT_APPLICABLE_ERRORS = frozenset({"NOT_SUPPORTED", "FUNCTION_NOT_FOUND"})
GPU_FAULT_ERRORS = {
    "GPU_IS_LOST": "GPU is lost",
    "RESET_REQUIRED": "GPU requires a reset",
    "CORRUPTED_INFOROM": "infoROM is corrupted",
}
# nvmlInit failures that say nothing about the node's health; all others are problems
INIT_UNKNOWN_ERRORS = frozenset(
    {
        "NO_PERMISSION",
        "TIMEOUT",
        "PYNVML_MISSING",
        "MEMORY",
        "INSUFFICIENT_RESOURCES",
        "IN_USE",
        "UNINITIALIZED",
    }
)
INIT_TEXT = {
    "LIBRARY_NOT_FOUND": "libnvidia-ml.so.1 not found (NVIDIA driver not installed)",
    "DRIVER_NOT_LOADED": "NVIDIA kernel driver not loaded",
    "LIB_RM_VERSION_MISMATCH": "NVML and kernel driver versions differ (upgraded without reboot?)",
}
HW_SLOWDOWN = {0x8: "HwSlowdown", 0x40: "HwThermalSlowdown", 0x80: "HwPowerBrakeSlowdown"}
OTHER_REASONS = {
    0x1: "GpuIdle",
    0x2: "ApplicationsClocksSetting",
    0x4: "SwPowerCap",
    0x10: "SyncBoost",
    0x20: "SwThermalSlowdown",
    0x100: "DisplayClockSetting",
    0x200: "BoardLimit",
    0x400: "Reliability",
}
GPU_IDLE = 0x1
RECOVERY_ACTIONS = {
    0: "NONE",
    1: "GPU_RESET",
    2: "NODE_REBOOT",
    3: "DRAIN_P2P",
    4: "DRAIN_AND_RESET",
    5: "RECOVER_IMEX_DOMAIN",
    6: "BUS_RESET",
    7: "SYSTEM_REBOOT",
}

Judge = Callable[[Mapping[str, Any], CheckConfig], Verdict]


# ---------------------------------------------------------------- judges
def _ecc(v: Mapping[str, Any], cfg: CheckConfig) -> Verdict:
    n = v["ecc_volatile_uncorrected"]
    ev = {"volatile_uncorrected": n}
    return (
        Verdict("problem", f"{n} volatile uncorrectable ECC error(s)", ev)
        if n > 0
        else Verdict("ok", "", ev)
    )


def _retired(v: Mapping[str, Any], cfg: CheckConfig) -> Verdict:
    total = v["retired_pages_sbe"] + v["retired_pages_dbe"]
    ev = {
        "pending": v["retired_pages_pending"],
        "sbe": v["retired_pages_sbe"],
        "dbe": v["retired_pages_dbe"],
    }
    if v["retired_pages_pending"]:
        return Verdict("problem", "page retirement pending (takes effect on reset/reboot)", ev)
    if total >= cfg.nvidia.retired_pages_limit:
        return Verdict(
            "problem", f"{total} retired pages (limit {cfg.nvidia.retired_pages_limit})", ev
        )
    return Verdict("ok", "", ev)


def _remapped(v: Mapping[str, Any], cfg: CheckConfig) -> Verdict:
    rows = dict(v["remapped_rows"])
    if rows.get("failure"):
        return Verdict(
            "problem", "row remapping failed (no spare rows: needs hands)", rows, "manual"
        )
    if rows.get("pending"):
        return Verdict("problem", "row remap pending (takes effect on GPU reset/reboot)", rows)
    return Verdict("ok", "", rows)


def _recovery(v: Mapping[str, Any], cfg: CheckConfig) -> Verdict:
    code = v["recovery_action"]
    name = RECOVERY_ACTIONS.get(code, f"action {code}")
    ev = {"recovery_action": code, "name": name}
    return Verdict("ok", "", ev) if code == 0 else Verdict("problem", f"driver asks for {name}", ev)


def _pcie(v: Mapping[str, Any], cfg: CheckConfig) -> Verdict:
    gen, max_gen, width, max_width = (
        v["pcie_gen"],
        v["pcie_max_gen"],
        v["pcie_width"],
        v["pcie_max_width"],
    )
    reasons = v.get("clocks_event_reasons")
    idle = isinstance(reasons, int) and bool(reasons & GPU_IDLE)
    ev = {"gen": gen, "max_gen": max_gen, "width": width, "max_width": max_width, "idle": idle}
    bad = []
    if width < max_width:
        bad.append(f"link width x{width} of x{max_width}")
    if gen < max_gen and not (idle and cfg.nvidia.allow_idle_pcie_downshift):
        bad.append(f"link Gen{gen} of Gen{max_gen}")
    if bad:
        return Verdict("problem", "PCIe " + ", ".join(bad), ev)
    return Verdict("ok", "", ev)


def _nvlink(v: Mapping[str, Any], cfg: CheckConfig) -> Verdict:
    states = {int(k): int(s) for k, s in dict(v["nvlink"]).items()}
    down = sorted(k for k, s in states.items() if not s)
    ev = {"links": len(states), "down": down}
    if down:
        return Verdict(
            "problem",
            f"NVLink {'link' if len(down) == 1 else 'links'} "
            f"{','.join(map(str, down))} down ({len(states) - len(down)}/{len(states)} up)",
            ev,
        )
    return Verdict("ok", "", ev)


def _slowdown(v: Mapping[str, Any], cfg: CheckConfig) -> Verdict:
    mask = v["clocks_event_reasons"]
    hw = [name for bit, name in HW_SLOWDOWN.items() if mask & bit]
    ev = {
        "reasons": hex(mask),
        "active": [n for b, n in {**OTHER_REASONS, **HW_SLOWDOWN}.items() if mask & b],
    }
    return (
        Verdict("problem", "hardware slowdown: " + ", ".join(hw), ev)
        if hw
        else Verdict("ok", "", ev)
    )


def _persistence(v: Mapping[str, Any], cfg: CheckConfig) -> Verdict:
    on = bool(v["persistence_mode"])
    if not on and cfg.nvidia.require_persistence_mode:
        return Verdict("problem", "persistence mode is off", {"enabled": False})
    return Verdict("ok", "", {"enabled": on})


# name -> (required readings, optional readings, judge, summary when all is well)
RULES: dict[str, tuple[tuple[str, ...], tuple[str, ...], Judge, str]] = {
    "nvidia.ecc": (("ecc_volatile_uncorrected",), (), _ecc, "no volatile uncorrectable ECC errors"),
    "nvidia.retired_pages": (
        ("retired_pages_pending", "retired_pages_sbe", "retired_pages_dbe"),
        (),
        _retired,
        "no page retirement pending",
    ),
    "nvidia.remapped_rows": (("remapped_rows",), (), _remapped, "no row remap pending or failed"),
    "nvidia.recovery_action": (
        ("recovery_action",),
        (),
        _recovery,
        "driver asks for no recovery action",
    ),
    "nvidia.pcie": (
        ("pcie_gen", "pcie_max_gen", "pcie_width", "pcie_max_width"),
        ("clocks_event_reasons",),
        _pcie,
        "PCIe links at full width and speed",
    ),
    "nvidia.nvlink": (("nvlink",), (), _nvlink, "all NVLink links up"),
    "nvidia.slowdown": (
        ("clocks_event_reasons",),
        (),
        _slowdown,
        "no hardware thermal or power slowdown",
    ),
    "nvidia.persistence": (("persistence_mode",), (), _persistence, "persistence mode enabled"),
}
CHECK_NAMES = ("nvidia.driver", "nvidia.count", *RULES)


# ---------------------------------------------------------- evaluation
def evaluate(snap: Any, cfg: CheckConfig) -> list[CheckResult]:
    driver = _driver(snap)
    if "value" not in snap.system.get("init", {}):
        why = f"NVML not available ({driver.summary})"
        return [driver] + [unknown(n, why) for n in CHECK_NAMES[1:]]
    count = _count(snap, cfg)
    if "value" not in snap.system.get("count", {}):
        # without the count we cannot know which GPUs were never read: nothing is ok
        return [driver, count] + [
            unknown(n, f"GPUs not enumerated ({count.summary})") for n in RULES
        ]
    results = [driver, count]
    for name, (needs, optional, judge, ok_text) in RULES.items():
        results.append(_per_gpu(snap, cfg, name, needs, optional, judge, ok_text))
    return results


def _error_text(r: Mapping[str, Any]) -> str:
    return f"{r.get('message') or r.get('error')} ({r.get('error')})"


def _driver(snap: Any) -> CheckResult:
    init = snap.system.get("init")
    if init is None:
        return unknown(
            "nvidia.driver", snap.failure or "NVML reader produced no answer", hung=snap.hung_call()
        )
    if "error" in init:
        err = init["error"]
        text = "NVML init failed: " + INIT_TEXT.get(err, _error_text(init))
        return (unknown if err in INIT_UNKNOWN_ERRORS else problem)(
            "nvidia.driver", text, error=err
        )
    version = (snap.system.get("driver_version") or {}).get("value")
    faults = []
    for i, readings in sorted(snap.gpus.items()):
        for op, r in readings.items():
            if r.get("error") in GPU_FAULT_ERRORS:
                faults.append((i, r["error"], op))
                break
    if faults:
        text = "; ".join(
            f"GPU {i}: {GPU_FAULT_ERRORS[e]} ({e} from {NVML_CALLS.get(op, op)})"
            for i, e, op in faults
        )
        return problem(
            "nvidia.driver",
            text,
            driver_version=version,
            faults=[{"gpu": i, "error": e, "call": op} for i, e, op in faults],
        )
    if snap.failure:
        return unknown("nvidia.driver", snap.failure, driver_version=version, hung=snap.hung_call())
    return ok("nvidia.driver", f"NVML up, driver {version}", driver_version=version)


def _count(snap: Any, cfg: CheckConfig) -> CheckResult:
    r = snap.system.get("count")
    expected = cfg.expected_gpus
    if r is None:
        return unknown("nvidia.count", "GPU count not read: " + (snap.failure or "no answer"))
    if "error" in r:
        status = problem if r["error"] in GPU_FAULT_ERRORS else unknown
        return status(
            "nvidia.count", "nvmlDeviceGetCount failed: " + _error_text(r), error=r["error"]
        )
    return count_result("nvidia.count", int(r["value"]), expected, source="NVML")


def _gpu_indices(snap: Any) -> list[int]:
    return list(range(int(snap.system["count"]["value"])))


def _label(i: int, readings: Mapping[str, Any]) -> str:
    bus = (readings.get("pci_bus_id") or {}).get("value")
    return f"GPU {i} ({bus})" if bus else f"GPU {i}"


def _gpu_verdict(
    snap: Any,
    cfg: CheckConfig,
    i: int,
    needs: tuple[str, ...],
    optional: tuple[str, ...],
    judge: Judge,
) -> Verdict:
    readings = snap.gpus.get(i, {})
    values: dict[str, Any] = {}
    worst_error: Verdict | None = None
    for op in ("handle", *needs):
        r = readings.get(op)
        if r is None:
            if snap.hung == (op, i):
                return Verdict("unknown", f"NVML call {snap.hung_call()} hung")
            return Verdict("unknown", "not read (NVML reader stopped early)")
        if "error" in r:
            err = r["error"]
            if err in NOT_APPLICABLE_ERRORS:
                worst_error = worst_error or Verdict("n/a", "not supported", {"error": err})
            elif err in GPU_FAULT_ERRORS:
                return Verdict(
                    "unknown",
                    f"unreadable: {GPU_FAULT_ERRORS[err]} (see nvidia.driver)",
                    {"error": err},
                )
            else:
                return Verdict("unknown", f"{op}: {_error_text(r)}", {"error": err})
        elif op != "handle":
            values[op] = r["value"]
    if worst_error:
        return worst_error
    for op in optional:
        values[op] = (readings.get(op) or {}).get("value")
    return judge(values, cfg)


def _per_gpu(
    snap: Any,
    cfg: CheckConfig,
    name: str,
    needs: tuple[str, ...],
    optional: tuple[str, ...],
    judge: Judge,
    ok_text: str,
) -> CheckResult:
    verdicts = {i: _gpu_verdict(snap, cfg, i, needs, optional, judge) for i in _gpu_indices(snap)}
    return fold(name, verdicts, {i: _label(i, snap.gpus.get(i, {})) for i in verdicts}, ok_text)
