"""Config sections for the safety valves: budget, breaker, flap damping, pause,
maintenance windows and drain."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fleetmedic.model.config.types import Duration, Percent, Quantity, Section, Window


class DrainConfig(Section):
    timeout: Duration = 600
    """Evictions refused by a PodDisruptionBudget (429) are retried this long, like kubectl."""
    pdb_blocked: Literal["wait", "skip", "force", "escalate"] = "wait"
    """Then: `wait` (try again later; PDBs are the app owner's word), `skip` (repair with
    those pods still running), `force` (delete them), `escalate` (to manual)."""
    retry_interval: Duration = 300
    """With `wait`, how long before the drain is tried again."""
    grace_period: int | None = None
    """Pod termination grace for evictions. Unset: each pod's own."""


class BreakerConfig(Section):
    enabled: bool = True
    threshold_percent: Percent = 20
    """Trip when more than this share of the pool turned unhealthy within `window`: one in
    five GPUs failing at once is a fabric, driver rollout or API problem, not five GPUs."""
    window: Duration = 600
    min_nodes: int = Field(3, ge=1)
    """And at least this many nodes: percentages of small pools are noise."""
    cooldown: Duration | None = None
    """Reset by itself after this long. Unset: a human resets it (safer after a storm)."""


class FlapConfig(Section):
    count: int = Field(3, ge=2, le=8)
    """Entries into repair within `window` that send a node straight to manual: the third
    trip in a week means the ladder is not fixing it."""
    window: Duration = 7 * 86400


class SafetyConfig(Section):
    max_concurrent: int = Field(3, ge=1)
    """Nodes with repair work under way at once. 3: enough to keep up with a steady failure
    rate, small enough that a bad playbook hurts few nodes."""
    max_concurrent_percent: Percent = 10
    """...and at most this share of the pool (rounded down, at least 1); the stricter wins."""
    min_healthy: Quantity = "50%"
    """No new repair starts while fewer nodes (count or "N%") are healthy: as medik8s
    minHealthy, when half the pool is sick the cause is systemic and reboots won't help."""
    breaker: BreakerConfig = BreakerConfig()
    flap: FlapConfig = FlapConfig()
    pause: bool = False
    """Stop all action (the pause annotation on the pause ConfigMap does the same at runtime)."""
    pause_configmap: str = "fleetmedic/fleetmedic"
    """namespace/name of the ConfigMap whose fleetmedic.io/pause annotation pauses all action."""
    maintenance_windows: tuple[Window, ...] = ()
    """When drains, reinstalls and reboots may start. Empty: any time."""
    drain: DrainConfig = DrainConfig()
