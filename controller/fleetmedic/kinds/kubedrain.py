"""Cordon and drain a node as ``kubectl drain`` does: evict, then wait for the pods to be gone.

1. Cordon (only a cordon we made is ever undone: the node carries an annotation saying so).
2. List the node's pods once and decide each one's fate (:mod:`fleetmedic.policy.drainplan`:
   DaemonSet and mirror pods are left alone, pods without a controller or with emptyDir
   data are refused unless config allows them, GPU-only mode leaves non-GPU pods).
3. Evict, with ``grace_period`` as the eviction's ``deleteOptions``. An eviction a
   PodDisruptionBudget refuses (429) is retried every few seconds, as kubectl does (and
   unlike ``kubernetes.core.k8s_drain``, which gives up on the first 429).
4. Wait until every evicted pod is gone: deleted, or recreated under a new UID (pods are
   tracked by UID, as kubectl does). One watch on the node's pods (field selector
   ``spec.nodeName``) sees them go, so the API calls do not grow with the pod count.
5. At ``timeout``: pods a PDB still protects are ``blocked``, and with ``force_blocked``
   (config ``pdb_blocked: force``) deleted instead, then waited for up to their grace
   period. Pods still terminating do not hold the repair: they are reported.

What the caller does with blocked and refused pods is its choice (``safety.drain.pdb_blocked``).
Long waits are logged every ``progress_interval``; the end of a drain is a Node Event.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from fleetmedic.errors import Expired, ForbiddenError, TemporaryError, TooManyRequests
from fleetmedic.model import keys, nodeedit
from fleetmedic.model.config.safety import DrainConfig
from fleetmedic.policy.drainplan import Fate, PodPlan, Rules, plan, refusal_hint

if TYPE_CHECKING:  # (the client loads in a second; Slurm's drain shares DrainResult)
    from fleetmedic.adapters.kube import Kube

log = logging.getLogger(__name__)
EVICT_RETRY = 5.0  # seconds between evictions a PDB refused (kubectl waits 5 s too)
FORCE_SLACK = 10.0  # force-deleted pods get their grace period and this long to go
SHOWN = 5  # pods named in one log line or message


@dataclasses.dataclass(frozen=True)
class DrainResult:
    evicted: tuple[str, ...]  # evicted (or force-deleted) and gone
    blocked: tuple[str, ...]  # still running: a PDB forbade eviction until the timeout
    skipped: tuple[tuple[str, str], ...]  # (pod, why) left alone on purpose
    refused: tuple[tuple[str, str], ...] = ()  # (pod, why) kubectl would refuse these too
    terminating: tuple[str, ...] = ()  # evicted, still terminating when the timeout passed
    force_denied: str | None = None  # why force could not delete (RBAC), if it was refused
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        return not self.blocked and not self.refused

    @property
    def status(self) -> str:
        """The executor's Outcome status: ok | blocked | forbidden."""
        if self.force_denied:
            return "forbidden"
        return "ok" if self.complete else "blocked"

    @property
    def message(self) -> str:
        """One line, what holds the drain first (the history keeps only its start)."""
        parts = []
        if self.blocked:
            parts.append(
                f"{len(self.blocked)} pod(s) protected by a PodDisruptionBudget: "
                f"{shown(self.blocked)}"
            )
        if self.force_denied:
            parts.append(
                "pdb_blocked is force but deleting them is not allowed (apply "
                f"deploy/controller/force-drain.yaml to grant it): {self.force_denied}"
            )
        if self.refused:
            parts.append(
                f"{len(self.refused)} refused: "
                + shown(
                    [f"{ref} ({why}; allowed by {refusal_hint(why)})" for ref, why in self.refused]
                )
            )
        if self.terminating:
            parts.append(f"{len(self.terminating)} still terminating: {shown(self.terminating)}")
        parts.append(f"evicted {len(self.evicted)} pod(s) in {self.seconds:.0f}s")
        return "; ".join(parts)


def shown(refs: list[str] | tuple[str, ...]) -> str:
    return ", ".join(refs[:SHOWN]) + (f" (+{len(refs) - SHOWN} more)" if len(refs) > SHOWN else "")


def cordon(kube: Kube, node: str) -> dict:
    """Mark unschedulable; remember that it was us only if it was schedulable."""

    def mutate(n: dict) -> bool:
        if (n.get("spec") or {}).get("unschedulable"):
            return False
        nodeedit.set_unschedulable(n, True)
        nodeedit.set_annotation(n, keys.ANN_CORDONED, "true")
        return True

    return kube.update_node(node, mutate)


def uncordon_if_ours(kube: Kube, node: str) -> bool:
    """Undo our own cordon; a cordon someone else made stays."""
    changed = False

    def mutate(n: dict) -> bool:
        nonlocal changed
        if (n.get("metadata") or {}).get("annotations", {}).get(keys.ANN_CORDONED) != "true":
            return False
        nodeedit.set_unschedulable(n, False)
        nodeedit.set_annotation(n, keys.ANN_CORDONED, None)
        changed = True
        return True

    kube.update_node(node, mutate)
    return changed


class PodsGone:
    """Which of the node's pods (by UID) are gone: a list, then a watch resumed from it."""

    def __init__(self, kube: Kube, node: str, pods: list[dict], resource_version: str) -> None:
        self.kube, self.node, self.rv = kube, node, resource_version
        self.present = {(p.get("metadata") or {}).get("uid") for p in pods}

    def relist(self) -> None:
        pods, self.rv = self.kube.list_pods_on_node(self.node)
        self.present = {(p.get("metadata") or {}).get("uid") for p in pods}

    def wait(self, uids: set[str], seconds: float) -> None:
        """Drop from ``uids`` the pods that are gone, waiting up to ``seconds`` for them."""
        uids.intersection_update(self.present)
        if not uids or seconds <= 0:
            return
        try:
            for kind, pod in self.kube.watch_pods_on_node(self.node, self.rv, math.ceil(seconds)):
                meta = pod.get("metadata") or {}
                self.rv = meta.get("resourceVersion") or self.rv
                if kind == "DELETED":
                    self.present.discard(meta.get("uid"))
                    uids.discard(meta.get("uid"))
                    if not uids:
                        return
        except Expired:
            pass  # the resourceVersion is too old: the list below starts afresh
        # the watch ended (its timeout, a dropped stream, 410): list to be sure of nothing missed
        self.relist()
        uids.intersection_update(self.present)

    def wait_until(self, uids: set[str], deadline: float, clock: Callable[[], float]) -> None:
        """:meth:`wait` round after round until ``uids`` are gone or ``deadline`` passes."""
        while uids and clock() < deadline:
            self.wait(uids, deadline - clock())


def drain(
    kube: Kube,
    node: str,
    settings: DrainConfig,
    *,
    timeout: float | None = None,
    force_blocked: bool = False,
    gpu_only: bool = False,
    retry: float = EVICT_RETRY,
    clock: Callable[[], float] = time.monotonic,
) -> DrainResult:
    """Drain ``node`` (see the module doc). ``timeout`` overrides ``settings.timeout``;
    ``gpu_only`` evicts only the pods that use a GPU (the node is still cordoned).

    Raises TemporaryError when an eviction kept failing for another reason than a PDB
    (API server errors) until the timeout: the drain could not be judged, and runs again.
    """
    start = clock()
    deadline = start + (timeout or settings.timeout)
    node_obj = cordon(kube, node)
    pods, rv = kube.list_pods_on_node(node)
    plans = plan(pods, Rules(settings.force, settings.delete_emptydir_data, gpu_only))
    gone = PodsGone(kube, node, pods, rv)
    by_uid = {p.uid: p for p in plans}
    to_evict = {p.uid: start for p in plans if p.fate is Fate.EVICT}  # uid -> next try
    failing: dict[str, TemporaryError] = {}  # uid -> the last error that was not a PDB's
    waiting = {p.uid for p in plans if p.fate is Fate.WAIT}
    _log_plan(node, plans, gpu_only)
    evicted: list[str] = []
    next_progress = start + settings.progress_interval
    while True:
        now = clock()
        for uid, due in list(to_evict.items()):
            if due > now:
                continue
            pod = by_uid[uid]
            try:
                kube.evict_pod(pod.namespace, pod.name, settings.grace_period)
            except TemporaryError as exc:  # 429: a PDB says not now; else the API server
                log.debug("%s: eviction of %s refused: %s", node, pod.ref, exc)
                to_evict[uid] = now + retry
                if isinstance(exc, TooManyRequests):
                    failing.pop(uid, None)
                else:
                    failing[uid] = exc
                continue
            failing.pop(uid, None)
            del to_evict[uid]
            waiting.add(uid)
            evicted.append(pod.ref)
        if (not to_evict and not waiting) or now >= deadline:
            break
        if now >= next_progress:
            _log_progress(node, by_uid, waiting, to_evict, deadline - now)
            next_progress = now + settings.progress_interval
        pause = min([deadline, next_progress, *to_evict.values()]) - clock()
        if waiting:
            gone.wait(waiting, pause)
        elif pause > 0:  # only PDB-refused evictions left: nothing to watch for until the retry
            time.sleep(pause)
    if failing:
        uid, last = next(iter(failing.items()))
        raise TemporaryError(
            f"{node}: drain: eviction of {len(failing)} pod(s) kept failing, "
            f"{by_uid[uid].ref}: {last}",
            delay=retry,
        )
    denied = None
    if to_evict and force_blocked:
        denied = _force(kube, node, settings, by_uid, to_evict, waiting, evicted)
        if not denied:
            slowest = max((_grace(settings, by_uid[u]) for u in waiting), default=0)
            gone.wait_until(waiting, clock() + slowest + FORCE_SLACK, clock)
    terminating = tuple(sorted(by_uid[uid].ref for uid in waiting))
    result = DrainResult(
        evicted=tuple(r for r in evicted if r not in terminating),
        blocked=tuple(sorted(by_uid[uid].ref for uid in to_evict)),
        skipped=tuple((p.ref, p.why) for p in plans if p.fate is Fate.LEAVE),
        refused=tuple((p.ref, p.why) for p in plans if p.fate is Fate.REFUSE),
        terminating=terminating,
        force_denied=denied,
        seconds=clock() - start,
    )
    _report(kube, node_obj, result)
    return result


def _grace(settings: DrainConfig, pod: PodPlan) -> int:
    return pod.grace if settings.grace_period is None else settings.grace_period


def _force(
    kube: Kube,
    node: str,
    settings: DrainConfig,
    by_uid: dict[str, PodPlan],
    to_evict: dict[str, float],
    waiting: set[str],
    evicted: list[str],
) -> str | None:
    """Delete what a PDB still protects; the reason RBAC refused it, if it did."""
    for uid in list(to_evict):
        pod = by_uid[uid]
        log.warning("%s: forcing deletion of %s despite its PodDisruptionBudget", node, pod.ref)
        try:
            kube.delete_pod(pod.namespace, pod.name, settings.grace_period)
        except ForbiddenError as exc:  # force is opt-in RBAC (deploy/controller/force-drain.yaml)
            return str(exc)
        del to_evict[uid]
        waiting.add(uid)
        evicted.append(pod.ref)
    return None


def _log_plan(node: str, plans: list[PodPlan], gpu_only: bool) -> None:
    fates = Counter(p.fate for p in plans)
    left = Counter(p.why for p in plans if p.fate is Fate.LEAVE)
    log.info(
        "%s: drain%s: %d pod(s) to evict, %d already terminating, left alone: %s",
        node,
        " (GPU pods only)" if gpu_only else "",
        fates[Fate.EVICT],
        fates[Fate.WAIT],
        ", ".join(f"{n} {why}" for why, n in sorted(left.items())) or "none",
    )
    for p in plans:
        if p.fate is Fate.REFUSE:
            log.warning(
                "%s: drain refuses %s: it %s (allowed by %s)",
                node,
                p.ref,
                p.why,
                refusal_hint(p.why),
            )


def _log_progress(
    node: str,
    by_uid: dict[str, PodPlan],
    waiting: set[str],
    to_evict: dict[str, float],
    left: float,
) -> None:
    parts = []
    if waiting:
        refs = sorted(by_uid[u].ref for u in waiting)
        parts.append(f"{len(refs)} pod(s) still terminating: {shown(refs)}")
    if to_evict:
        refs = sorted(by_uid[u].ref for u in to_evict)
        parts.append(f"{len(refs)} eviction(s) refused by a PodDisruptionBudget: {shown(refs)}")
    log.info("%s: drain waits (%.0fs left): %s", node, max(0.0, left), "; ".join(parts))


def _report(kube: Kube, node_obj: dict, result: DrainResult) -> None:
    """Log the end, and say it on the Node where it helps (events are best effort).
    Blocked and refused drains get their event from the ladder (DrainBlocked)."""
    name = (node_obj.get("metadata") or {}).get("name")
    if result.terminating:
        log.warning("%s: drain timed out, going on: %s", name, result.message)
        kube.post_event(node_obj, "DrainTimeout", result.message, type="Warning")
    elif result.complete:
        log.info("%s: drained: %s", name, result.message)
        kube.post_event(node_obj, "Drained", result.message)
    else:
        log.info("%s: drain incomplete: %s", name, result.message)
