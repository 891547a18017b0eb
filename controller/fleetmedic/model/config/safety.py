"""Config sections for the safety valves: budget, breaker, flap damping, pause,
maintenance windows and drain."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fleetmedic.model.config.types import Duration, Percent, Quantity, Section, Window


class DrainConfig(Section):
    """How a node is drained before a disruptive phase: as ``kubectl drain`` does it, with
    kubectl's names where a kubectl flag exists.

    Left out of kubectl's flags, on purpose: ``ignore-daemonsets`` (always: DaemonSet pods
    come straight back, and every GPU node runs some, the device plugin and our agent
    among them), ``disable-eviction`` (it ignores every PodDisruptionBudget from the first
    moment; ``pdb_blocked: force`` does so only after `timeout`), ``skip-wait-for-delete-
    timeout`` (`timeout` already bounds the wait, and a pod stuck terminating on a sick
    node ends with the reboot), ``pod-selector`` (the ladder's rung chooses: all pods, or
    only GPU pods for a GPU reset) and ``dry-run`` (``fleetmedic plan``)."""

    timeout: Duration = 600
    """The whole drain, as kubectl's ``--timeout``: evictions a PodDisruptionBudget refuses
    (429) are retried, and evicted pods waited for until they are gone, this long. Pods
    still terminating then do not hold the repair: the reboot ends them (a process stuck
    on a hung GPU never exits by itself); the drain says which in the log and a
    ``DrainTimeout`` event."""
    pdb_blocked: Literal["wait", "skip", "force", "escalate"] = "wait"
    """Then: `wait` (try again later; PDBs are the app owner's word), `skip` (repair with
    those pods still running), `force` (delete them), `escalate` (to manual). Pods the
    drain refuses (see `force` and `delete_emptydir_data`) are held the same way, except
    that `force` here never deletes them."""
    retry_interval: Duration = 300
    """With `wait`, how long before the drain is tried again."""
    grace_period: int | None = Field(None, ge=0)
    """Seconds each evicted pod gets to terminate (the eviction's
    ``deleteOptions.gracePeriodSeconds``, kubectl's ``--grace-period``). Unset: each pod's
    own ``terminationGracePeriodSeconds``, the app owner's word on how long a clean stop
    (a checkpoint) takes. Keep it below `timeout`, or the repair cuts it short."""
    force: bool = False
    """kubectl's ``--force``: also evict pods that declare no controller. Off, as in
    kubectl: nothing recreates such a pod, so evicting it loses it for good, while a
    reboot without evicting it brings it back on this node. Refused pods stay and are
    reported, and `pdb_blocked` decides (with `skip` the repair goes ahead around them)."""
    delete_emptydir_data: bool = False
    """kubectl's ``--delete-emptydir-data``: also evict pods with emptyDir volumes, whose
    data is deleted with the pod. Off, as in kubectl. Memory-backed emptyDirs count too
    (kubectl's rule), and training pods often mount one as /dev/shm: fleets that run them
    usually turn this on, since a reboot loses that memory anyway."""
    progress_interval: Duration = 30
    """While a drain waits, it logs the pods it still waits for this often."""


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
    max_replacements_per_day: int = Field(2, ge=0)
    """The replace rung hands at most this many nodes of the pool to the cloud in any 24
    hours, counted from when a hand-off is admitted (before its notice email); more wait,
    fenced (the record is on the pause ConfigMap, so a restart does not reset it). 2: a bad
    instance or two a day is normal churn, more says something systemic (an image, a
    driver, a fabric) that new instances will not cure. 0: none (the rung waits)."""
    maintenance_windows: tuple[Window, ...] = ()
    """When drains, reinstalls and reboots may start. Empty: any time."""
    drain: DrainConfig = DrainConfig()

    def pause_ref(self) -> tuple[str, str] | None:
        """(namespace, name) of the pause ConfigMap, or None when config turned it off."""
        namespace, _, name = self.pause_configmap.partition("/")
        return (namespace, name) if name else None
