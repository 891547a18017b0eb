"""What hardware this node has, from what the GPU probes already read (issue 20 part 1).

The hardware-profile comparison (:mod:`fleetmedic.checks.hwprofile`) needs the node's
GPUs as plain figures. They come from the same readings the GPU checks judge, so a
profile costs no extra call into the driver:

- NVIDIA, from the NVML :class:`~fleetmedic.checks.nvidia.Snapshot`: the count
  (``nvmlDeviceGetCount``), model (``nvmlDeviceGetName``), memory
  (``nvmlDeviceGetMemoryInfo``), PCIe link generation and width, and NVLink links up.
  A GPU lowers its link *generation* when idle (``GpuIdle``); then the current
  generation says nothing about the slot, so the link's maximum (NVML: "possible with
  this device and system", which a Gen4 riser under a Gen5 GPU lowers) stands in, as
  ``nvidia.pcie`` does. Width is always the current one.
- AMD, from ``amd-smi list`` (count), ``amd-smi metric --pcie`` (current width and
  speed; GT/s -> generation) and rocminfo's GPU agents (model, in agent order). Memory
  and XGMI links up are not in what the probe reads: not compared.

A figure that could not be read is ``None`` and is not compared. When the GPUs could
not be enumerated at all the functions return ``None``: the profile's GPU part is then
``unknown``, never "0 of 8 GPUs".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleetmedic.checks import amd_parse
from fleetmedic.checks.hwprofile import Gpu
from fleetmedic.checks.nvidia_rules import GPU_IDLE
from fleetmedic.checks.proc import Completed

# PCIe transfer rate per lane (GT/s) -> generation
PCIE_GEN_BY_GTS = {2.5: 1, 5: 2, 8: 3, 16: 4, 32: 5, 64: 6, 128: 7}


def _value(readings: Mapping[str, Any], op: str) -> Any:
    return (readings.get(op) or {}).get("value")


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


def from_nvml(snap: Any, allow_idle_downshift: bool = True) -> list[Gpu] | None:
    """The GPUs NVML enumerated; None when it did not get that far."""
    count = _int(_value(snap.system, "count"))
    if "value" not in (snap.system.get("init") or {}) or count is None:
        return None
    gpus = []
    for i in range(count):
        r = snap.gpus.get(i, {})
        name = _value(r, "name")
        memory = _int(_value(r, "memory_total"))
        gen, max_gen = _int(_value(r, "pcie_gen")), _int(_value(r, "pcie_max_gen"))
        reasons = _int(_value(r, "clocks_event_reasons"))
        idle = reasons is not None and bool(reasons & GPU_IDLE)
        if idle and allow_idle_downshift and max_gen is not None:
            gen = max_gen
        links = _value(r, "nvlink")
        gpus.append(
            Gpu(
                index=i,
                model=name if isinstance(name, str) else None,
                memory_mib=memory // (1024 * 1024) if memory is not None else None,
                pcie_gen=gen,
                pcie_width=_int(_value(r, "pcie_width")),
                links_up=sum(1 for s in links.values() if s) if isinstance(links, dict) else None,
            )
        )
    return gpus


def pcie_gen(gts: float | int | None) -> int | None:
    """32 (GT/s) -> 5; None when not a known rate."""
    if gts is None:
        return None
    return PCIE_GEN_BY_GTS.get(float(gts))


def from_amd(runs: Mapping[str, Completed]) -> list[Gpu] | None:
    """The GPUs ``amd-smi list`` shows; None when it did not run or printed nonsense."""
    listed = _entries(runs, "list")
    if listed is None:
        return None
    metric = _entries(runs, "metric") or {}
    models = _agent_models(runs)
    gpus = []
    for pos, i in enumerate(sorted(listed)):
        pcie = (metric.get(i) or {}).get("pcie")
        pcie = pcie if isinstance(pcie, dict) else {}
        width = amd_parse.num(pcie.get("width"))
        gpus.append(
            Gpu(
                index=i,
                model=models[pos] if models and len(models) == len(listed) else None,
                pcie_gen=pcie_gen(amd_parse.num(pcie.get("speed"))),
                pcie_width=int(width) if width is not None else None,
            )
        )
    return gpus


def _entries(runs: Mapping[str, Completed], job: str) -> dict[int, dict] | None:
    run = runs.get(job)
    if run is None or not run.ok:
        return None
    try:
        return amd_parse.gpu_entries(run.stdout)
    except amd_parse.ParseError:
        return None


def _agent_models(runs: Mapping[str, Completed]) -> list[str]:
    run = runs.get("rocminfo")
    if run is None or not run.ok:
        return []
    agents = amd_parse.rocminfo_agents(run.stdout)
    return [
        a.get("Marketing Name") or a.get("Name", "")
        for a in agents
        if a.get("Device Type") == "GPU"
    ]
