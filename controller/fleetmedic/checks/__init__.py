"""Node health checks: NVIDIA (pynvml), AMD (amd-smi, rocm-smi, rocminfo), network, kernel log.

The API, for ``fleetmedic check``, the agent and the verify playbook::

    from fleetmedic.checks import CheckConfig, run_checks, exit_code
    results = run_checks(CheckConfig(vendor="nvidia", expected_gpus=8), categories=None)
    for r in results: r.name, r.status, r.summary, r.evidence, r.category, r.action

See :mod:`fleetmedic.checks.base` for the result contract and
:mod:`fleetmedic.checks.runner` for timeouts. Names are resolved lazily so the
NVML reader child (``python -m fleetmedic.checks.nvml_worker``) starts fast.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CheckResult": "base", "overall": "base", "exit_code": "base", "by_category": "base",
    "CheckConfig": "config", "NvidiaConfig": "config", "AmdConfig": "config",
    "NetworkConfig": "config", "KernelConfig": "config",
    "run_checks": "runner", "round_limit": "runner",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"fleetmedic.checks.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'fleetmedic.checks' has no attribute {name!r}")
