"""The node's hardware as the profile sees it, from the readings the GPU probes already
make: the NVML reader's JSON lines (nvml_worker's protocol) and amd-smi/rocminfo output."""

from __future__ import annotations

import json

from fleetmedic.checks import inventory, nvidia
from fleetmedic.checks.hwprofile import Gpu
from fleetmedic.checks.proc import Completed

GIB = 1024**3


def snapshot(gpus: int, per_gpu: dict[int, dict] | None = None, **system) -> nvidia.Snapshot:
    base = {
        "name": "NVIDIA H100 80GB HBM3",
        "memory_total": 81559 * 1024 * 1024,
        "pcie_gen": 5,
        "pcie_max_gen": 5,
        "pcie_width": 16,
        "nvlink": {str(k): 1 for k in range(18)},
        "clocks_event_reasons": 0,
    }
    lines = [{"op": "init", "value": True}, {"op": "count", "value": gpus}]
    lines = [{**ln, **system.get(ln["op"], {})} for ln in lines]
    for i in range(gpus):
        for op, value in {**base, **(per_gpu or {}).get(i, {})}.items():
            if isinstance(value, tuple):  # ("error", NAME)
                lines.append({"op": op, "gpu": i, "error": value[1], "code": 3})
            else:
                lines.append({"op": op, "gpu": i, "value": value})
    lines.append({"op": "done"})
    return nvidia.parse("\n".join(json.dumps(ln) for ln in lines))


def test_nvml_figures_become_gpus() -> None:
    gpus = inventory.from_nvml(snapshot(2, {1: {"nvlink": {"0": 1, "1": 0, "2": 1}}}))
    assert gpus == [
        Gpu(0, "NVIDIA H100 80GB HBM3", 81559, pcie_gen=5, pcie_width=16, links_up=18),
        Gpu(1, "NVIDIA H100 80GB HBM3", 81559, pcie_gen=5, pcie_width=16, links_up=2),
    ]


def test_an_idle_gpu_is_judged_by_its_link_maximum() -> None:
    # GpuIdle (0x1): Gen1 now says nothing about the slot; the maximum (device and system) does
    idle = {"pcie_gen": 1, "clocks_event_reasons": 1}
    (gpu,) = inventory.from_nvml(snapshot(1, {0: idle})) or []
    assert gpu.pcie_gen == 5
    (gpu,) = inventory.from_nvml(snapshot(1, {0: {**idle, "pcie_max_gen": 4}})) or []
    assert gpu.pcie_gen == 4  # a Gen4 riser under a Gen5 GPU
    (gpu,) = inventory.from_nvml(snapshot(1, {0: idle}), allow_idle_downshift=False) or []
    assert gpu.pcie_gen == 1
    (gpu,) = inventory.from_nvml(snapshot(1, {0: {"pcie_gen": 4}})) or []
    assert gpu.pcie_gen == 4  # busy: the current generation


def test_unread_figures_are_none_and_not_enumerated_is_none() -> None:
    missing = {
        "memory_total": ("error", "FUNCTION_NOT_FOUND"),
        "nvlink": ("error", "NOT_SUPPORTED"),
        "name": ("error", "GPU_IS_LOST"),
    }
    (gpu,) = inventory.from_nvml(snapshot(1, {0: missing})) or []
    assert gpu == Gpu(0, None, None, pcie_gen=5, pcie_width=16, links_up=None)
    assert inventory.from_nvml(snapshot(1, count={"value": None, "error": "TIMEOUT"})) is None
    assert inventory.from_nvml(nvidia.parse(json.dumps({"op": "init", "error": "X"}))) is None


def done(stdout: str) -> Completed:
    return Completed(("tool",), 0, stdout, "", 0.1)


ROCMINFO = "".join(
    f"*******\nAgent {n}\n*******\n  Name:                    gfx942\n"
    f"  Marketing Name:          AMD Instinct MI300X\n  Device Type:             GPU\n"
    for n in (2, 3)
)


def test_amd_smi_figures_become_gpus() -> None:
    runs = {
        "list": done(json.dumps([{"gpu": 0, "bdf": "0000:05:00.0"}, {"gpu": 1}])),
        "metric": done(
            json.dumps(
                {
                    "gpu_data": [
                        {"gpu": 0, "pcie": {"width": 16, "speed": {"value": 32, "unit": "GT/s"}}},
                        {"gpu": 1, "pcie": {"width": 8, "speed": {"value": 16, "unit": "GT/s"}}},
                    ]
                }
            )
        ),
        "rocminfo": done(ROCMINFO),
    }
    assert inventory.from_amd(runs) == [
        Gpu(0, "AMD Instinct MI300X", pcie_gen=5, pcie_width=16),
        Gpu(1, "AMD Instinct MI300X", pcie_gen=4, pcie_width=8),
    ]
    # models only when the agents line up with the GPUs one to one
    assert inventory.from_amd({**runs, "rocminfo": done("")})[0].model is None
    assert inventory.from_amd({"list": Completed(("amd-smi",), 1, "", "boom", 0.1)}) is None
    assert inventory.pcie_gen(2.5) == 1 and inventory.pcie_gen(20) is None
