"""Node health checks: NVIDIA (pynvml), AMD (amd-smi, rocm-smi, rocminfo), network, kernel log.

The API, for ``fleetmedic check``, the agent and the verify playbook::

    from fleetmedic.checks import CheckConfig, NetworkConfig, run_checks, exit_code, round_limit
    cfg = CheckConfig(vendor="nvidia", expected_gpus=8, timeout=15,
                      network=NetworkConfig(peers=("10.0.0.1:5201",), min_mbps=5000))
    results = run_checks(cfg)                          # every category
    results = run_checks(cfg, categories={"network"})  # e.g. while a repair taint is on
    for r in results: r.name, r.status, r.summary, r.evidence, r.category, r.action

``run_checks`` never raises and returns within ``round_limit(cfg)`` seconds: each
probe has its own hard deadline (a hung driver call or tool is killed and its
checks are ``unknown``). Results map 1:1 onto the policy's ``Observation``
(category, status, name, action).

Checks (name: what makes it a problem):

- ``nvidia.driver``: NVML init fails (driver not loaded, library missing, version
  mismatch) or any GPU returns GPU_IS_LOST / RESET_REQUIRED; ``nvidia.count``: fewer
  GPUs than expected; ``nvidia.ecc``: volatile uncorrectable ECC > 0;
  ``nvidia.retired_pages``: retirement pending, or too many retired;
  ``nvidia.remapped_rows``: remap pending, or failed (action ``manual``);
  ``nvidia.recovery_action``: the driver's GPU recovery action is not NONE;
  ``nvidia.pcie``: link width (or, on a busy GPU, generation) below max;
  ``nvidia.nvlink``: a link down; ``nvidia.slowdown``: HW (thermal/power brake)
  slowdown; ``nvidia.persistence``: persistence mode off.
- ``amd.count``, ``amd.ecc`` (uncorrectable/deferred), ``amd.bad_pages`` (pending;
  unreservable: ``manual``), ``amd.pcie``, ``amd.xgmi``, ``amd.agents`` (rocminfo GPU
  agents missing, or ROCm cannot start).
- ``network.throughput``: iperf3 to a peer below ``min_mbps``.
- ``fabric.ports``: an RDMA port (InfiniBand, RoCE, EFA; sysfs) not ACTIVE/LinkUp or gone
  since the last round, or an error counter that grew past its threshold (a flap).
- ``profile.*`` (with a hardware profile): ``profile.gpus``, ``.model``, ``.memory``,
  ``.links``, ``.pcie`` (category gpu) and ``profile.rdma_count``, ``.rdma_link_layer``,
  ``.rdma_rate`` (network): a figure that differs from the profile, the difference in
  ``evidence["difference"]``; ``profile.select``: the named profile cannot be used.
- ``kernel.log``: a catalog finding of this boot whose action is reboot/reimage/manual.
- ``gpu.vendor`` / ``<category>.probe``: ``unknown`` only (no vendor found; a probe bug).

See :mod:`fleetmedic.checks.base` for the result contract and
:mod:`fleetmedic.checks.runner` for timeouts. Names are resolved lazily so the
NVML reader child (``python -m fleetmedic.checks.nvml_worker``) starts fast.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CheckResult": "base",
    "overall": "base",
    "exit_code": "base",
    "by_category": "base",
    "CheckConfig": "config",
    "NvidiaConfig": "config",
    "AmdConfig": "config",
    "NetworkConfig": "config",
    "KernelConfig": "config",
    "HardwareConfig": "config",
    "FabricConfig": "config",
    "run_checks": "runner",
    "Memory": "runner",
    "round_limit": "runner",
}
__all__ = sorted(_EXPORTS)  # noqa: PLE0605 (built from the lazy export table)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"fleetmedic.checks.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'fleetmedic.checks' has no attribute {name!r}")
