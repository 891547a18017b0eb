"""GPU partition layouts on test-fleet nodes, for the return gate's tests and bench.

The fake NVML and nvidia-smi (tests/fakes/nvidia/README.md, "MIG") keep a GPU's MIG state
with the boot that made it, so a real reboot of the nspawn node (a new boot_id) loses the
instances and, on an H100, MIG mode; the fake amd-smi keeps AMD partitions the same way.
"""

from __future__ import annotations

import json
from typing import Any

# Two H100s, each split into two 3g.40gb instances (placements 0:4 and 4:4), each with
# its default compute instance: what `nvidia-mig-parted apply` of `all-3g.40gb` makes.
MIG_3G = [(1, "3g.40gb", 0), (2, "3g.40gb", 4)]


def mig(node, gis=MIG_3G, gpus: int = 2, **top: Any) -> None:
    """Every GPU of ``node`` in MIG mode with the GPU instances ``(id, profile, start)``,
    made in the node's current boot; ``top`` adds top-level scenario keys."""
    boot = node.boot_id()
    state = {
        "current": 1,
        "pending": 1,
        "boot_id": boot,
        "gis": [
            {"id": i, "profile": p, "start": s, "cis": [{"id": 0, "profile": p}]} for i, p, s in gis
        ],
    }
    data = {"driver_version": "550.90.07", "gpus": [{"mig": state} for _ in range(gpus)], **top}
    (node.state_dir / "nvml.json").write_text(json.dumps(data))


def mig_devices(node) -> list[str]:
    """The node's MIG devices as ``nvidia-smi -L`` lists them (profile and UUID)."""
    out = node.ssh("nvidia-smi -L").stdout
    return [line.strip() for line in out.splitlines() if "MIG-" in line]


def set_scenario_key(node, key: str, value: Any) -> None:
    """One top-level key of the node's NVML scenario (None removes it)."""
    path = node.state_dir / "nvml.json"
    data = json.loads(path.read_text())
    if value is None:
        data.pop(key, None)
    else:
        data[key] = value
    path.write_text(json.dumps(data))


def mig_parted_applies(node) -> list[bool]:
    """Each `nvidia-mig-parted apply` on the node: whether it changed the GPUs."""
    calls = node.state_dir / "mig-parted-calls.jsonl"
    if not calls.exists():
        return []
    return [json.loads(line)["changed"] for line in calls.read_text().splitlines()]


def amd(node, compute: str = "CPX", memory: str = "NPS4", gpus: int = 2) -> None:
    """AMD GPUs in ``compute``/``memory`` partitions, set in the node's current boot."""
    boot = node.boot_id()
    g = {"compute_partition": compute, "memory_partition": memory, "partition_boot_id": boot}
    (node.state_dir / "amd.json").write_text(json.dumps({"gpus": [dict(g) for _ in range(gpus)]}))


def clear(node) -> None:
    for name in ("mig-parted-calls.jsonl", "amd.json"):
        (node.state_dir / name).unlink(missing_ok=True)
    node.ssh("rm -rf /var/lib/fleetmedic/partition", check=False)
