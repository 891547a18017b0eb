"""The NVML reader, run as a child process: ``python -m fleetmedic.checks.nvml_worker``.

Why a process: an NVML call into a wedged driver can block forever inside C
code, and a Python thread stuck there can never be stopped. The parent
(:mod:`fleetmedic.checks.nvidia`) kills this process at its deadline instead.

Protocol: one JSON object per line on stdout, flushed as it goes, so the
parent keeps everything read before a hang and knows the call that hung:

    {"begin": "remapped_rows", "gpu": 1}                 before each call
    {"op": "remapped_rows", "gpu": 1, "value": {...}}    its result, or
    {"op": "remapped_rows", "gpu": 1, "error": "GPU_IS_LOST", "code": 15, "message": "GPU is lost"}
    {"op": "done"}                                        the end

With ``--identity`` it also reads what names each GPU for an RMA case (serial, board
part number, InfoROM and VBIOS versions: ``fleetmedic gpus``); the checks do not need
them, so their rounds skip those calls.

Only reads: nothing here changes GPU state.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any


def emit(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    identity = "--identity" in (sys.argv[1:] if argv is None else argv)
    try:
        import pynvml as nv
    except ImportError as exc:  # the agent's venv always has it; guard anyway
        emit(op="init", error="PYNVML_MISSING", code=-1, message=str(exc))
        emit(op="done")
        return 0

    names = {
        getattr(nv, n): n[len("NVML_ERROR_") :] for n in dir(nv) if n.startswith("NVML_ERROR_")
    }

    def call(op: str, fn: Callable[[], Any], gpu: int | None = None) -> tuple[bool, Any]:
        emit(begin=op, gpu=gpu)
        try:
            value = fn()
        except nv.NVMLError as exc:
            emit(
                op=op,
                gpu=gpu,
                error=names.get(exc.value, "UNKNOWN"),
                code=exc.value,
                message=str(exc),
            )
            return False, None
        except Exception as exc:  # a binding bug must cost one reading, not the whole round
            emit(
                op=op,
                gpu=gpu,
                error="PYTHON_EXCEPTION",
                code=-2,
                message=f"{type(exc).__name__}: {exc}",
            )
            return False, None
        emit(op=op, gpu=gpu, value=value)
        return True, value

    ok, _ = call("init", lambda: nv.nvmlInit() or True)
    if not ok:
        emit(op="done")
        return 0
    call("driver_version", lambda: _text(nv.nvmlSystemGetDriverVersion()))
    ok, count = call("count", nv.nvmlDeviceGetCount)
    for i in range(count if ok else 0):
        handle = None

        def get_handle(i: int = i) -> bool:
            nonlocal handle
            handle = nv.nvmlDeviceGetHandleByIndex(i)
            return True

        if not call("handle", get_handle, i)[0]:
            continue
        for op, fn in _queries(nv, handle) + (_identity(nv, handle) if identity else []):
            call(op, fn, i)
    try:
        nv.nvmlShutdown()
    except nv.NVMLError:
        pass
    emit(op="done")
    return 0


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _queries(nv: Any, h: Any) -> list[tuple[str, Callable[[], Any]]]:
    uncorrected, volatile = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC

    def remapped_rows() -> dict:
        corr, unc, pending, failure = nv.nvmlDeviceGetRemappedRows(h)
        return {
            "correctable": corr,
            "uncorrectable": unc,
            "pending": bool(pending),
            "failure": bool(failure),
        }

    def retired(cause: int) -> Callable[[], int]:
        return lambda: len(nv.nvmlDeviceGetRetiredPages_v2(h, cause))

    def clocks_event_reasons() -> int:
        try:
            return int(nv.nvmlDeviceGetCurrentClocksEventReasons(h))
        except (nv.NVMLError_FunctionNotFound, AttributeError):  # driver < 535
            return int(nv.nvmlDeviceGetCurrentClocksThrottleReasons(h))

    def recovery_action() -> int:
        field = nv.nvmlDeviceGetFieldValues(h, [nv.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])[0]
        if field.nvmlReturn != nv.NVML_SUCCESS:
            raise nv.NVMLError(field.nvmlReturn)
        return int(field.value.uiVal)

    def nvlink() -> dict[str, int]:
        states: dict[str, int] = {}
        for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                states[str(link)] = int(nv.nvmlDeviceGetNvLinkState(h, link))
            except nv.NVMLError as exc:
                if exc.value == nv.NVML_ERROR_INVALID_ARGUMENT:
                    break  # past the last link
                if exc.value != nv.NVML_ERROR_NOT_SUPPORTED:
                    raise
        if not states:
            raise nv.NVMLError(nv.NVML_ERROR_NOT_SUPPORTED)
        return states

    return [
        ("name", lambda: _text(nv.nvmlDeviceGetName(h))),
        ("uuid", lambda: _text(nv.nvmlDeviceGetUUID(h))),
        ("pci_bus_id", lambda: _text(nv.nvmlDeviceGetPciInfo(h).busId)),
        (
            "ecc_volatile_uncorrected",
            lambda: int(nv.nvmlDeviceGetTotalEccErrors(h, uncorrected, volatile)),
        ),
        ("retired_pages_pending", lambda: bool(nv.nvmlDeviceGetRetiredPagesPendingStatus(h))),
        (
            "retired_pages_sbe",
            retired(nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
        ),
        ("retired_pages_dbe", retired(nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)),
        ("remapped_rows", remapped_rows),
        ("recovery_action", recovery_action),
        ("pcie_gen", lambda: int(nv.nvmlDeviceGetCurrPcieLinkGeneration(h))),
        ("pcie_max_gen", lambda: int(nv.nvmlDeviceGetMaxPcieLinkGeneration(h))),
        ("pcie_width", lambda: int(nv.nvmlDeviceGetCurrPcieLinkWidth(h))),
        ("pcie_max_width", lambda: int(nv.nvmlDeviceGetMaxPcieLinkWidth(h))),
        ("nvlink", nvlink),
        ("clocks_event_reasons", clocks_event_reasons),
        ("persistence_mode", lambda: int(nv.nvmlDeviceGetPersistenceMode(h))),
        # for the hardware profile (checks/inventory.py): bytes, as NVML counts them
        ("memory_total", lambda: int(nv.nvmlDeviceGetMemoryInfo(h).total)),
    ]


def _identity(nv: Any, h: Any) -> list[tuple[str, Callable[[], Any]]]:
    return [
        ("serial", lambda: _text(nv.nvmlDeviceGetSerial(h))),
        ("board_part_number", lambda: _text(nv.nvmlDeviceGetBoardPartNumber(h))),
        ("inforom_image_version", lambda: _text(nv.nvmlDeviceGetInforomImageVersion(h))),
        ("vbios_version", lambda: _text(nv.nvmlDeviceGetVbiosVersion(h))),
    ]


if __name__ == "__main__":
    sys.exit(main())
