"""Run every check once: the one entry point for ``fleetmedic check``, the agent
and the verify playbook.

    results = run_checks(CheckConfig(vendor="nvidia", expected_gpus=8),
                         categories={"network"})          # e.g. while under repair

Probes (GPU, network, kernel log) run at the same time, each in a thread that
only *waits* on a child process with its own hard deadline, so a round takes
about as long as the slowest probe. As a last guard against a bug in our own
code, a probe thread still running well past its deadline is left behind and
its category reported ``unknown``; an exception in a probe becomes ``unknown``
too. This function never raises and never blocks past :func:`round_limit`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping

from fleetmedic.checks import amd, kernel, network, nvidia, nvidia_rules
from fleetmedic.checks.base import CATEGORIES, Category, CheckResult, unknown, with_duration
from fleetmedic.checks.config import CheckConfig

GUARD = 5.0  # seconds past a probe's own deadline before the guard gives up on it


def gpu(cfg: CheckConfig, env: Mapping[str, str] | None = None) -> list[CheckResult]:
    """The GPU checks of ``cfg.vendor``; ``auto`` tries NVML, then the AMD tools."""
    if cfg.vendor == "none":
        return []
    if cfg.vendor == "nvidia":
        return nvidia.run(cfg, env)
    if cfg.vendor == "amd":
        return amd.run(cfg, env)
    start = time.monotonic()
    snap = nvidia.collect(cfg.timeout, env)
    amd_tools = any(amd.tools_present(env).values())
    # Not NVIDIA: no libnvidia-ml at all, or (the library is there but no NVIDIA driver is
    # loaded) and ROCm tools are installed, as on a test node that carries both stand-ins.
    if not (nvidia.library_missing(snap) or (amd_tools and nvidia.driver_not_loaded(snap))):
        return with_duration(nvidia_rules.evaluate(snap, cfg), time.monotonic() - start)
    if amd_tools:
        return amd.run(cfg, env)
    return [
        unknown(
            "gpu.vendor",
            "no NVIDIA library (libnvidia-ml.so.1) and no AMD tools found; "
            "pass the vendor explicitly (none for a CPU node)",
            vendor="auto",
        )
    ]


def probe_limits(cfg: CheckConfig) -> dict[str, float]:
    """Each probe's own worst case (auto may read NVML, then run the AMD tools)."""
    return {
        "gpu": cfg.timeout * (2 if cfg.vendor == "auto" else 1),
        "network": network.budget(cfg) if cfg.network.peers else 0.0,
        "kernel": cfg.timeout,
    }


def round_limit(cfg: CheckConfig) -> float:
    """Upper bound on one run_checks call, for callers that schedule rounds."""
    return max(probe_limits(cfg).values()) + GUARD


PROBES: dict[str, Callable[[CheckConfig, Mapping[str, str] | None], list[CheckResult]]] = {
    "gpu": gpu,
    "network": network.run,
    "kernel": kernel.run,
}


def run_checks(
    cfg: CheckConfig, categories: Iterable[str] | None = None, env: Mapping[str, str] | None = None
) -> list[CheckResult]:
    wanted = [c for c in CATEGORIES if categories is None or c in set(categories)]
    limits = probe_limits(cfg)
    out: dict[str, list[CheckResult]] = {}
    threads = {}
    for cat in wanted:

        def body(cat: Category = cat) -> None:
            try:
                out[cat] = PROBES[cat](cfg, env)
            except Exception as exc:  # a bug of ours must not stop the agent's loop
                out[cat] = [
                    unknown(f"{cat}.probe", f"probe failed: {type(exc).__name__}: {exc}", cat)
                ]

        thread = threading.Thread(target=body, name=f"fleetmedic-check-{cat}", daemon=True)
        thread.start()
        threads[cat] = thread
    start = time.monotonic()
    results: list[CheckResult] = []
    for cat, thread in threads.items():
        thread.join(max(0.0, start + limits[cat] + GUARD - time.monotonic()))
        if thread.is_alive() or cat not in out:
            results.append(
                unknown(
                    f"{cat}.probe", f"probe did not finish within {limits[cat] + GUARD:g}s", cat
                )
            )
        else:
            results.extend(out[cat])
    return results
