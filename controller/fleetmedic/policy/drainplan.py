"""Which pods a drain evicts, and why the others stay: ``kubectl drain``'s rules as a
pure function over the pods' JSON, plus a GPU-only mode for the reset rung.

=================================  ========  ==============================================
pod                                fate      why
=================================  ========  ==============================================
mirror (``kubernetes.io/config.    leave     the kubelet owns it; the API cannot delete it
mirror`` annotation)
controlled by a DaemonSet          leave     it would come straight back (DaemonSets ignore
                                             the cordon); kubectl's ``--ignore-daemonsets``
finished (Succeeded, Failed)       leave     holds nothing; evicting it only loses its logs
no GPU, in GPU-only mode           leave     a GPU reset does not disturb it
already terminating                wait      it is going; wait for it like an evicted one
declares no controller             refuse    nothing would recreate it: evicting it loses it
                                             for good, unless ``force`` (kubectl's ``--force``)
uses an emptyDir volume            refuse    its local data dies with it, unless
                                             ``delete_emptydir_data`` (kubectl's flag)
anything else                      evict
=================================  ========  ==============================================

A refused pod is never silently skipped: the drain reports it, and the pod stays where it
is (the ``pdb_blocked`` policy decides what happens next, as for a PDB). Both refusal
reasons are given when both apply, so one config change is seen to be enough or not.

Known gaps, on purpose: a DaemonSet pod is left alone without checking that its DaemonSet
still exists (kubectl deletes such orphans under ``--force``; that needs read access to
every DaemonSet), and finished pods are left in place where kubectl deletes them.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from typing import Any

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
DEFAULT_GRACE = 30  # the API server's default terminationGracePeriodSeconds

# Extended resources that put a GPU (or a slice of one) in a pod: the device plugins'
# whole GPUs, time-sliced GPUs renamed with a suffix (``nvidia.com/gpu.shared``) and MIG
# instances (``nvidia.com/mig-1g.10gb``). A reset of the GPU ends all of them. GPUs
# claimed through DRA (``spec.resourceClaims``) are not seen here.
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
GPU_RESOURCE_PREFIXES = ("nvidia.com/mig-",)


class Fate(enum.Enum):
    EVICT = "evict"
    WAIT = "wait"  # already terminating: nothing to evict, but wait until it is gone
    LEAVE = "leave"  # left alone on purpose
    REFUSE = "refuse"  # kubectl would refuse to drain it with these settings


# Refusal reasons and the setting that allows each.
NO_CONTROLLER = "declares no controller"
EMPTYDIR = "has emptyDir data"
ALLOWED_BY = {NO_CONTROLLER: "force", EMPTYDIR: "delete_emptydir_data"}


@dataclasses.dataclass(frozen=True)
class Rules:
    """The drain's knobs (config ``safety.drain``; ``gpu_only`` from the ladder's rung)."""

    force: bool = False
    delete_emptydir_data: bool = False
    gpu_only: bool = False


@dataclasses.dataclass(frozen=True)
class PodPlan:
    namespace: str
    name: str
    uid: str
    fate: Fate
    why: str  # one short phrase: "DaemonSet", "mirror", "declares no controller", ...
    grace: int  # the pod's own terminationGracePeriodSeconds

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def plan(pods: Iterable[Mapping[str, Any]], rules: Rules) -> list[PodPlan]:
    """One :class:`PodPlan` per pod, in the order given."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        fate, why = decide(pod, rules)
        grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        out.append(
            PodPlan(
                namespace=str(meta.get("namespace", "")),
                name=str(meta.get("name", "")),
                uid=str(meta.get("uid", "")),
                fate=fate,
                why=why,
                grace=DEFAULT_GRACE if grace is None else int(grace),
            )
        )
    return out


def decide(pod: Mapping[str, Any], rules: Rules) -> tuple[Fate, str]:
    """The fate of one pod and why (see the module's table, checked top to bottom)."""
    meta = pod.get("metadata") or {}
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return Fate.LEAVE, "mirror"
    owner = controller_of(pod)
    if owner is not None and owner.get("kind") == "DaemonSet":
        return Fate.LEAVE, "DaemonSet"
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return Fate.LEAVE, "finished"
    if rules.gpu_only and not uses_gpu(pod):
        return Fate.LEAVE, "no GPU"
    if meta.get("deletionTimestamp"):
        return Fate.WAIT, "terminating"
    refusals = []
    if owner is None and not rules.force:
        refusals.append(NO_CONTROLLER)
    if has_emptydir(pod) and not rules.delete_emptydir_data:
        refusals.append(EMPTYDIR)
    if refusals:
        return Fate.REFUSE, " and ".join(refusals)
    return Fate.EVICT, "GPU" if rules.gpu_only else "workload"


def controller_of(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ownerReference marked ``controller: true``, as kubectl's GetControllerOf."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def has_emptydir(pod: Mapping[str, Any]) -> bool:
    """Any emptyDir volume, memory-backed ones included (as kubectl counts them)."""
    return any("emptyDir" in v for v in (pod.get("spec") or {}).get("volumes") or [])


def is_gpu_resource(name: str) -> bool:
    return any(name == r or name.startswith(r + ".") for r in GPU_RESOURCES) or name.startswith(
        GPU_RESOURCE_PREFIXES
    )


def uses_gpu(pod: Mapping[str, Any]) -> bool:
    """Whether any container, init containers included, requests or limits a GPU."""
    spec = pod.get("spec") or {}
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        res = c.get("resources") or {}
        for amounts in (res.get("limits") or {}, res.get("requests") or {}):
            if any(
                is_gpu_resource(k) and str(v).strip() not in ("0", "") for k, v in amounts.items()
            ):
                return True
    return False


def refusal_hint(why: str) -> str:
    """Which settings would let the drain evict a pod refused for ``why``."""
    knobs = [f"safety.drain.{ALLOWED_BY[r]}" for r in why.split(" and ") if r in ALLOWED_BY]
    return " and ".join(knobs)
