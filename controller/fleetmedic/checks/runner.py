"""Run every check once: the one entry point for ``fleetmedic check``, the agent
and the verify playbook.

    results = run_checks(CheckConfig(vendor="nvidia", expected_gpus=8),
                         categories={"network"})          # e.g. while under repair

Probes (GPU, network, RDMA fabric, kernel log) run at the same time, each in a thread
that only *waits* on a child process with its own hard deadline (the fabric probe reads
sysfs files), so a round takes about as long as the slowest probe. As a last guard
against a bug in our own code, a probe thread still running well past its deadline is
left behind and its category reported ``unknown``; an exception in a probe becomes
``unknown`` too. This function never raises and never blocks past :func:`round_limit`.

Hardware profile (``cfg.hardware.profile``, a name the agent picks from the Node's
labels each round): its GPU figures are compared with what the GPU probe read
(:mod:`fleetmedic.checks.inventory`), in category ``gpu``; its RDMA figures with the
ports the fabric probe read, in category ``network``, so they keep running while the
node is under repair. The fabric probe's counter deltas need the previous reading: the
agent passes the same :class:`Memory` every round; ``fleetmedic check`` has none, and
then only port state is judged.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fleetmedic.checks import (
    amd,
    fabric,
    hwprofile,
    inventory,
    kernel,
    network,
    nvidia,
    nvidia_rules,
)
from fleetmedic.checks.base import CATEGORIES, Category, CheckResult, unknown, with_duration
from fleetmedic.checks.config import CheckConfig
from fleetmedic.checks.hwprofile import Gpu

GUARD = 5.0  # seconds past a probe's own deadline before the guard gives up on it


@dataclasses.dataclass
class Memory:
    """What the agent keeps between rounds (in memory: a restart starts afresh)."""

    fabric_counters: dict[str, dict[str, int]] | None = None
    """Each RDMA port's counters at the last reading; ports that went away since stay
    in it, so a vanished port is reported every round until it is back."""


Profile = tuple[str, Mapping[str, Any]]  # (name, body)


def gpu(
    cfg: CheckConfig, env: Mapping[str, str] | None = None, profile: Profile | None = None
) -> list[CheckResult]:
    """The GPU checks of ``cfg.vendor`` (``auto`` tries NVML, then the AMD tools), then
    the profile's GPU figures compared with what they read."""
    start = time.monotonic()
    results, gpus = _gpu_readings(cfg, env)
    if profile is None or cfg.vendor == "none":
        return results
    name, body = profile
    if gpus is None:
        found = [unknown("profile.gpus", "GPUs not enumerated (see the GPU checks)")]
    else:
        found = hwprofile.compare_gpus(body, gpus)
    return results + with_duration(_named(found, name), time.monotonic() - start)


def _gpu_readings(
    cfg: CheckConfig, env: Mapping[str, str] | None
) -> tuple[list[CheckResult], list[Gpu] | None]:
    if cfg.vendor == "none":
        return [], None
    start = time.monotonic()
    if cfg.vendor in ("nvidia", "auto"):
        snap = nvidia.collect(cfg.timeout, env)
        amd_tools = cfg.vendor == "auto" and any(amd.tools_present(env).values())
        # auto, not NVIDIA: no libnvidia-ml at all, or (the library is there but no NVIDIA
        # driver is loaded) and ROCm tools are installed, as on a test node that carries
        # both stand-ins.
        not_nvidia = cfg.vendor == "auto" and (
            nvidia.library_missing(snap) or (amd_tools and nvidia.driver_not_loaded(snap))
        )
        if not not_nvidia:
            results = nvidia_rules.evaluate(snap, cfg)
            gpus = inventory.from_nvml(snap, cfg.nvidia.allow_idle_pcie_downshift)
            return with_duration(results, time.monotonic() - start), gpus
        if not amd_tools:
            return [
                unknown(
                    "gpu.vendor",
                    "no NVIDIA library (libnvidia-ml.so.1) and no AMD tools found; "
                    "pass the vendor explicitly (none for a CPU node)",
                    vendor="auto",
                )
            ], None
    runs, tools = amd.collect(cfg.timeout, env)
    results = amd.evaluate(runs, tools, cfg)
    return with_duration(results, time.monotonic() - start), inventory.from_amd(runs)


def fabric_checks(
    cfg: CheckConfig, profile: Profile | None = None, memory: Memory | None = None
) -> list[CheckResult]:
    """RDMA ports from sysfs (state, counter deltas against ``memory``), then the
    profile's RDMA figures. Nothing at all on a node that has no RDMA ports, had none
    at the last reading, and whose profile expects none."""
    if not cfg.fabric.enabled:
        return []
    start = time.monotonic()
    ports = fabric.without(fabric.read_ports(cfg.fabric.sysfs_root), cfg.fabric.ignore)
    previous = memory.fabric_counters if memory is not None else None
    out: list[CheckResult] = []
    if ports or previous:
        out.append(fabric.check_ports(ports, previous, cfg.fabric.thresholds))
    if memory is not None:
        now = fabric.counter_snapshot(ports)
        gone = {k: v for k, v in (previous or {}).items() if k not in now}
        memory.fabric_counters = {**gone, **now}
    if profile is not None:
        out.extend(_named(hwprofile.compare_rdma(profile[1], ports), profile[0]))
    return with_duration(out, time.monotonic() - start)


def _named(results: list[CheckResult], profile: str) -> list[CheckResult]:
    """The profile's name in each result's evidence (which profile said so)."""
    return [dataclasses.replace(r, evidence={**r.evidence, "profile": profile}) for r in results]


def resolve_profile(cfg: CheckConfig) -> tuple[Profile | None, CheckResult | None]:
    """The profile ``cfg.hardware`` names, or the reason it cannot be used (unknown)."""
    hw = cfg.hardware
    if not hw.enabled or not hw.profile:
        return None, None
    try:
        profiles = hwprofile.load_cached(hw.profiles)
    except hwprofile.ProfileError as exc:
        return None, unknown("profile.select", f"hardware profiles not loaded: {exc}")
    body = profiles.get(hw.profile)
    if body is None:
        return None, unknown("profile.select", f"no hardware profile named {hw.profile!r}")
    return (hw.profile, body), None


def probe_limits(cfg: CheckConfig) -> dict[str, float]:
    """Each probe's own worst case (auto may read NVML, then run the AMD tools)."""
    return {
        "gpu": cfg.timeout * (2 if cfg.vendor == "auto" else 1),
        "network": network.budget(cfg) if cfg.network.peers else 0.0,
        "fabric": cfg.timeout,
        "kernel": cfg.timeout,
    }


def round_limit(cfg: CheckConfig) -> float:
    """Upper bound on one run_checks call, for callers that schedule rounds."""
    return max(probe_limits(cfg).values()) + GUARD


# probe -> the category its results (and its "did not finish" unknown) fall in
PROBE_CATEGORY: dict[str, Category] = {
    "gpu": "gpu",
    "network": "network",
    "fabric": "network",
    "kernel": "kernel",
}


def run_checks(
    cfg: CheckConfig,
    categories: Iterable[str] | None = None,
    env: Mapping[str, str] | None = None,
    memory: Memory | None = None,
) -> list[CheckResult]:
    wanted = set(CATEGORIES if categories is None else categories)
    profile, profile_error = resolve_profile(cfg)
    probes: dict[str, Callable[[], list[CheckResult]]] = {
        "gpu": lambda: gpu(cfg, env, profile),
        "network": lambda: network.run(cfg, env),
        "fabric": lambda: fabric_checks(cfg, profile, memory),
        "kernel": lambda: kernel.run(cfg, env),
    }
    limits = probe_limits(cfg)
    out: dict[str, list[CheckResult]] = {}
    threads = {}
    for name, probe in probes.items():
        cat = PROBE_CATEGORY[name]
        if cat not in wanted:
            continue

        def body(name: str = name, cat: Category = cat, probe=probe) -> None:
            try:
                out[name] = probe()
            except Exception as exc:  # a bug of ours must not stop the agent's loop
                out[name] = [
                    unknown(f"{name}.probe", f"probe failed: {type(exc).__name__}: {exc}", cat)
                ]

        thread = threading.Thread(target=body, name=f"fleetmedic-check-{name}", daemon=True)
        thread.start()
        threads[name] = thread
    start = time.monotonic()
    results: list[CheckResult] = []
    if profile_error is not None and wanted & {"gpu", "network"}:
        results.append(profile_error)
    for name, thread in threads.items():
        thread.join(max(0.0, start + limits[name] + GUARD - time.monotonic()))
        if thread.is_alive() or name not in out:
            results.append(
                unknown(
                    f"{name}.probe",
                    f"probe did not finish within {limits[name] + GUARD:g}s",
                    PROBE_CATEGORY[name],
                )
            )
        else:
            results.extend(out[name])
    return results
