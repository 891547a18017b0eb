"""Cordon and drain a node through the Eviction API, honouring PDBs.

Like ``kubectl drain`` (and unlike ``kubernetes.core.k8s_drain``, which gives
up on the first 429), a PDB-blocked eviction is retried until ``timeout``.
What happens then is the caller's choice (config ``safety.drain.pdb_blocked``):
``wait`` (try again next cycle), ``skip`` (repair without draining them),
``force`` (delete the pods, ignoring the PDB) or ``escalate``.
Only a cordon we made is ever undone: the node carries an annotation saying so.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

from fleetmedic.adapters.kube import Kube
from fleetmedic.errors import ForbiddenError, TemporaryError
from fleetmedic.model import keys, nodeedit

log = logging.getLogger(__name__)
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@dataclasses.dataclass(frozen=True)
class DrainResult:
    evicted: tuple[str, ...]
    blocked: tuple[str, ...]  # ns/name still running because a PDB forbade eviction
    skipped: tuple[str, ...]  # DaemonSet and mirror pods, left alone on purpose
    force_denied: str | None = None  # why force could not delete (RBAC), if it was refused

    @property
    def complete(self) -> bool:
        return not self.blocked


def is_left_alone(pod: dict) -> bool:
    """DaemonSet pods come straight back and mirror pods belong to the kubelet."""
    meta = pod.get("metadata") or {}
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return True
    if any(ref.get("kind") == "DaemonSet" for ref in meta.get("ownerReferences") or []):
        return True
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _ref(pod: dict) -> str:
    return f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}"


def cordon(kube: Kube, node: str) -> None:
    """Mark unschedulable; remember that it was us only if it was schedulable."""

    def mutate(n: dict) -> bool:
        if (n.get("spec") or {}).get("unschedulable"):
            return False
        nodeedit.set_unschedulable(n, True)
        nodeedit.set_annotation(n, keys.ANN_CORDONED, "true")
        return True

    kube.update_node(node, mutate)


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


def drain(
    kube: Kube,
    node: str,
    timeout: float,
    *,
    force_blocked: bool = False,
    poll: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
) -> DrainResult:
    """Evict every pod but DaemonSet/mirror pods; retry PDB refusals until ``timeout``."""
    cordon(kube, node)
    deadline = clock() + timeout
    pods = kube.list_pods_on_node(node)
    skipped = tuple(_ref(p) for p in pods if is_left_alone(p))
    pending = {_ref(p): p for p in pods if not is_left_alone(p)}
    evicted: list[str] = []
    while pending:
        for ref, pod in list(pending.items()):
            try:
                kube.evict_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])
                evicted.append(ref)
                del pending[ref]
            except TemporaryError as exc:  # 429: a PDB says not now
                log.debug("eviction of %s refused: %s", ref, exc)
        if not pending or clock() >= deadline:
            break
        time.sleep(poll)
    denied = None
    if pending and force_blocked:
        for ref, pod in list(pending.items()):
            log.warning("forcing deletion of %s despite its PodDisruptionBudget", ref)
            try:
                kube.delete_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])
            except (
                ForbiddenError
            ) as exc:  # force is opt-in RBAC (deploy/controller/force-drain.yaml)
                denied = str(exc)
                break
            evicted.append(ref)
            del pending[ref]
    return DrainResult(tuple(evicted), tuple(sorted(pending)), skipped, denied)
