"""NVSentinel on the test API server: its own CRD, and a stand-in for its part of the hand-off.

NVSentinel itself (MongoDB, its monitors, its Go controllers) does not run here. What it
does to a node and to an ExternalRemediationRequest (ERR) is small and documented, so the
:class:`NVSentinel` stand-in does exactly that, and nothing of fleetmedic's side:

- fault-quarantine: cordon, its cordon labels (``k8saas.nvidia.com/cordon-by`` ...), and
  the state label ``dgxc.nvidia.com/nvsentinel-state`` (quarantined, then node-drainer's
  drain-succeeded, then fault-remediation's remediating);
- fault-remediation: the ERR, rendered as the template of NVSentinel's tutorial
  "Integrating External Remediation" (v1.24.0+) renders it: ``extrr-<HealthEvent id>``,
  the ``app.kubernetes.io/managed-by: nvsentinel`` label, the ``preserve`` annotation and
  ``spec.healthEvent``; errorCode and entitiesImpacted only when the event has them (the
  tutorial's template copies single-valued fields only; a template that loops over them
  gives the full event, as ADR-040 intends);
- janitor's ERR reconciler (janitor/pkg/controller/externalremediationrequest_controller.go
  at v1.19.0): the cleanup finalizer and both conditions ``Unknown`` first, then one Node
  write with the release taint ``nvsentinel.dgxc.nvidia.com/external-remediation=<name>``
  and ``nvsentinel.dgxc.nvidia.com/managed=false``, then ``NVSentinelOwnershipReleased=True``
  (reason ReleaseTaintApplied). On ``ExternalRemediationComplete=True``: one Node write
  removing both marks and ``status.completionTime``; on False nothing; on deletion the same
  cleanup, then the finalizer goes.
- the take-back: once janitor cleaned up, NVSentinel's monitors report the node healthy and
  fault-quarantine uncordons it and drops its labels (:meth:`NVSentinel.take_back`; done on
  Complete=True when ``uncordon_on_complete``).

Every NVSentinel write is recorded in :attr:`NVSentinel.actions` with its time, so a test
can tell who acted on a node when. The CRD is installed from
tests/data/nvsentinel/external_remediation.crd.yaml, NVSentinel's own file (its header
names the release); status writes are therefore checked by NVSentinel's own schema.
"""

from __future__ import annotations

import copy
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "tests" / "data" / "nvsentinel" / "external_remediation.crd.yaml"
GROUP, VERSION, PLURAL = "nvsentinel.dgxc.nvidia.com", "v1", "externalremediationrequests"
API = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
RELEASE_TAINT = "nvsentinel.dgxc.nvidia.com/external-remediation"
MANAGED_LABEL = "nvsentinel.dgxc.nvidia.com/managed"
STATE_LABEL = "dgxc.nvidia.com/nvsentinel-state"
FINALIZER = "nvsentinel.dgxc.nvidia.com/external-remediation-cleanup"
RELEASED, COMPLETE = "NVSentinelOwnershipReleased", "ExternalRemediationComplete"
LABEL_PREFIX = "k8saas.nvidia.com/"  # fault-quarantine's default labelPrefix
MERGE = "application/merge-patch+json"
XID79 = "NVRM: Xid (PCI:0000:5a:00): 79, pid=4242, name=python3, GPU has fallen off the bus."


def install_crd(kube, timeout: float = 30.0) -> dict:
    """NVSentinel's CRD on the API server (idempotent), once it is Established and served."""
    crd = yaml.safe_load(CRD_FILE.read_text())
    name = crd["metadata"]["name"]
    kube.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd, ok=(409,))
    deadline = time.monotonic() + timeout
    while True:
        got = kube.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        established = any(
            c.get("type") == "Established" and c.get("status") == "True"
            for c in (got.get("status") or {}).get("conditions") or []
        )
        if established:
            try:
                kube.request("GET", API)
                return got
            except Exception:  # served a moment after Established
                pass
        if time.monotonic() > deadline:
            raise AssertionError(f"CRD {name} not served after {timeout:.0f}s: {got.get('status')}")
        time.sleep(0.1)


def health_event(
    node: str,
    *,
    action: str | int = "RESTART_BM",
    codes: Sequence[str] = ("79",),
    check: str = "SysLogsXIDError",
    agent: str = "syslog-health-monitor",
    fatal: bool = True,
    message: str = XID79,
    entities: Sequence[tuple[str, str]] = (),
    custom: str = "",
    event_id: str | None = None,
) -> dict:
    """A HealthEvent as NVSentinel's monitors emit it (data-models health_event.proto), in
    the CRD's JSON names."""
    he: dict[str, Any] = {
        "version": 1,
        "agent": agent,
        "componentClass": "GPU",
        "checkName": check,
        "nodeName": node,
        "isFatal": fatal,
        "isHealthy": False,
        "message": message,
        "recommendedAction": action,
        "processingStrategy": "EXECUTE_REMEDIATION",
        "id": event_id or uuid.uuid4().hex[:24],
        "generatedTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "metadata": {"chassis_serial": "1320820063748"},
    }
    if codes:
        he["errorCode"] = list(codes)
    if entities:
        he["entitiesImpacted"] = [{"entityType": t, "entityValue": v} for t, v in entities]
    if custom:
        he["customRecommendedAction"] = custom
    return he


@dataclass(frozen=True)
class Act:
    at: float  # time.monotonic()
    node: str
    what: str  # quarantine | drain | request | release | take-back | cleanup


class NVSentinel:
    """The stand-in (see the module docstring). ``start()`` runs janitor's reconcile of
    completions and deletions on a thread; ``stop()`` ends it."""

    def __init__(self, kube, *, uncordon_on_complete: bool = True, poll: float = 0.1) -> None:
        self.kube, self.poll, self.uncordon_on_complete = kube, poll, uncordon_on_complete
        self.actions: list[Act] = []
        self.made: list[str] = []  # the requests it created (:meth:`forget` removes them)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # -- what a test asks for --------------------------------------------------------------
    def hand_over(self, node: str, event: Mapping[str, Any]) -> str:
        """NVSentinel's whole pipeline for ``event`` on ``node``: quarantine, drain, the
        request, the release. Returns the request's name."""
        self.quarantine(node)
        self.set_state(node, "drain-succeeded", "drain")
        name = self.create_request(event)
        self.set_state(node, "remediating", "remediate")
        self.release(name)
        return name

    def quarantine(self, node: str) -> None:
        """fault-quarantine: cordon, its labels, state quarantined."""
        stamp = time.strftime("%Y-%m-%dT%H-%M-%SZ", time.gmtime())
        self._patch_node(
            node,
            lambda n: (
                n["spec"].__setitem__("unschedulable", True),
                n["metadata"]["labels"].update(
                    {
                        f"{LABEL_PREFIX}cordon-by": "NVSentinel",
                        f"{LABEL_PREFIX}cordon-reason": "gpu-fatal-error",
                        f"{LABEL_PREFIX}cordon-timestamp": stamp,
                        STATE_LABEL: "quarantined",
                    }
                ),
            ),
        )
        self._did(node, "quarantine")

    def set_state(self, node: str, state: str, what: str) -> None:
        self._patch_node(node, lambda n: n["metadata"]["labels"].update({STATE_LABEL: state}))
        self._did(node, what)

    def create_request(self, event: Mapping[str, Any]) -> str:
        """fault-remediation: the ERR from the tutorial's template (cluster-scoped)."""
        name = f"extrr-{event['id']}"
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ExternalRemediationRequest",
            "metadata": {
                "name": name,
                "labels": {"app.kubernetes.io/managed-by": "nvsentinel"},
                "annotations": {
                    "nvsentinel.nvidia.com/preserve": "true",
                    "nvsentinel.nvidia.com/trace-id": uuid.uuid4().hex,
                    "nvsentinel.nvidia.com/span-id": uuid.uuid4().hex[:16],
                },
            },
            "spec": {"healthEvent": dict(event)},
        }
        self.kube.request("POST", API, body)
        self.made.append(name)
        self._did(str(event["nodeName"]), "request")
        return name

    def release(self, name: str, *, initialize: bool = True) -> float:
        """janitor: finalizer and initial conditions, the release write, then
        NVSentinelOwnershipReleased=True. Returns ``time.monotonic()`` right after that
        condition was written (the moment the node is released)."""
        if initialize:
            self.initialize(name)
        err = self.get(name)
        node = err["spec"]["healthEvent"]["nodeName"]

        def mark(n: dict) -> None:
            taints = [t for t in n["spec"].get("taints") or [] if t["key"] != RELEASE_TAINT]
            taints.append({"key": RELEASE_TAINT, "value": name, "effect": "NoSchedule"})
            n["spec"]["taints"] = taints
            n["metadata"]["labels"][MANAGED_LABEL] = "false"

        self._patch_node(node, mark)
        self._did(node, "release")
        self._set_condition(
            name,
            RELEASED,
            "True",
            "ReleaseTaintApplied",
            f"applied release taint {RELEASE_TAINT}={name} and managed=false label to node "
            f"{node!r}",
        )
        return time.monotonic()

    def initialize(self, name: str) -> None:
        """janitor's first reconcile: the finalizer, both conditions Unknown."""
        err = self.get(name)
        fins = list(err["metadata"].get("finalizers") or [])
        if FINALIZER not in fins:
            self.kube.request(
                "PATCH",
                f"{API}/{name}",
                {
                    "metadata": {
                        "finalizers": [*fins, FINALIZER],
                        "resourceVersion": err["metadata"]["resourceVersion"],
                    }
                },
                content_type=MERGE,
            )
        if not self.condition(name, RELEASED):
            self._set_condition(
                name,
                RELEASED,
                "Unknown",
                "Initializing",
                "Reconciler has not yet applied the release taint and managed=false label.",
            )
        if not self.condition(name, COMPLETE):
            self._set_condition(
                name,
                COMPLETE,
                "Unknown",
                "AwaitingExternalSystem",
                "External system has not yet reported completion.",
            )

    def delete(self, name: str) -> None:
        """An operator's ``kubectl delete extrr NAME`` (the finalizer holds it until
        :meth:`reconcile` cleans the node up)."""
        self.kube.request("DELETE", f"{API}/{name}", ok=(404,))

    def take_back(self, node: str) -> None:
        """NVSentinel owns the node again: its monitors' healthy event makes fault-quarantine
        uncordon it and drop its labels."""

        def back(n: dict) -> None:
            labels = n["metadata"]["labels"]
            for key in [k for k in labels if k.startswith(LABEL_PREFIX) or k == STATE_LABEL]:
                labels[key] = None
            labels[f"{LABEL_PREFIX}uncordon-by"] = "NVSentinel"
            n["spec"]["unschedulable"] = False

        self._patch_node(node, back)
        self._did(node, "take-back")

    def forget(self) -> None:
        """Remove the requests it created, finalizer and all (the API server is shared by
        the session: no later test sees them)."""
        for name in self.made:
            try:
                err = self.kube.request("GET", f"{API}/{name}", ok=(404,))
                if err.get("metadata", {}).get("finalizers"):
                    self.kube.request(
                        "PATCH",
                        f"{API}/{name}",
                        {"metadata": {"finalizers": None}},
                        content_type=MERGE,
                    )
                self.kube.request("DELETE", f"{API}/{name}", ok=(404,))
            except Exception as exc:  # best effort in a teardown
                print(f"nvsentinel stand-in: could not remove {name}: {exc}")

    # -- janitor's reconcile of completions and deletions --------------------------------
    def start(self) -> NVSentinel:
        self._thread = threading.Thread(target=self._run, name="nvsentinel-standin", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self.poll):
            try:
                self.reconcile()
            except Exception as exc:  # (the API server restarting under a test)
                print(f"nvsentinel stand-in: {type(exc).__name__}: {exc}")

    def reconcile(self) -> None:
        for err in self.kube.request("GET", API).get("items") or []:
            name = err["metadata"]["name"]
            node = err["spec"]["healthEvent"]["nodeName"]
            status = err.get("status") or {}
            if err["metadata"].get("deletionTimestamp"):
                if FINALIZER in (err["metadata"].get("finalizers") or []):
                    self._cleanup(node, name)
                    self._drop_finalizer(name)
                continue
            done = _cond(status, COMPLETE)
            if done and done.get("status") == "True" and not status.get("completionTime"):
                self._cleanup(node, name)
                self._complete_time(name)
                if self.uncordon_on_complete:
                    self.take_back(node)

    def _cleanup(self, node: str, name: str) -> None:
        def clean(n: dict) -> None:
            n["spec"]["taints"] = [
                t for t in n["spec"].get("taints") or [] if t["key"] != RELEASE_TAINT
            ] or None
            if MANAGED_LABEL in n["metadata"]["labels"]:
                n["metadata"]["labels"][MANAGED_LABEL] = None

        try:
            self._patch_node(node, clean)
        except Exception as exc:
            if getattr(exc, "status", None) != 404:  # the node is gone: nothing to clean
                raise
        self._did(node, "cleanup")

    def _drop_finalizer(self, name: str) -> None:
        err = self.get(name)
        fins = [f for f in err["metadata"].get("finalizers") or [] if f != FINALIZER]
        self.kube.request(
            "PATCH",
            f"{API}/{name}",
            {
                "metadata": {
                    "finalizers": fins or None,
                    "resourceVersion": err["metadata"]["resourceVersion"],
                }
            },
            content_type=MERGE,
        )

    def _complete_time(self, name: str) -> None:
        self.kube.request(
            "PATCH",
            f"{API}/{name}/status",
            {"status": {"completionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}},
            content_type=MERGE,
        )

    # -- reading ----------------------------------------------------------------------------
    def get(self, name: str) -> dict:
        return self.kube.request("GET", f"{API}/{name}")

    def exists(self, name: str) -> bool:
        return bool(self.kube.request("GET", f"{API}/{name}", ok=(404,)).get("metadata"))

    def condition(self, name: str, type_: str) -> dict | None:
        return _cond(self.get(name).get("status") or {}, type_)

    def acts_on(self, node: str) -> list[Act]:
        with self._lock:
            return [a for a in self.actions if a.node == node]

    # -- plumbing ---------------------------------------------------------------------------
    def _did(self, node: str, what: str) -> None:
        with self._lock:
            self.actions.append(Act(time.monotonic(), node, what))

    def _set_condition(self, name: str, type_: str, status: str, reason: str, msg: str) -> None:
        """As janitor's patchStatusConditions: re-read, set the one condition, write the list
        (conflict-safe here: RV-guarded, retried)."""
        for _ in range(20):
            err = self.get(name)
            conds = [c for c in (err.get("status") or {}).get("conditions") or []]
            old = next((c for c in conds if c.get("type") == type_), None)
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            since = old["lastTransitionTime"] if old and old.get("status") == status else now
            new = [c for c in conds if c.get("type") != type_] + [
                {
                    "type": type_,
                    "status": status,
                    "reason": reason,
                    "message": msg,
                    "lastTransitionTime": since,
                    "observedGeneration": err["metadata"].get("generation", 1),
                }
            ]
            body = {
                "metadata": {"resourceVersion": err["metadata"]["resourceVersion"]},
                "status": {"conditions": new},
            }
            try:
                self.kube.request("PATCH", f"{API}/{name}/status", body, content_type=MERGE)
                return
            except Exception as exc:
                if getattr(exc, "status", None) != 409:
                    raise
        raise AssertionError(f"{name}: 20 conflicts in a row")

    def _patch_node(self, node: str, edit) -> None:
        """Read-modify-write with the resourceVersion as precondition (409: again)."""
        for _ in range(50):
            n = self.kube.request("GET", f"/api/v1/nodes/{node}")
            new = copy.deepcopy(n)
            new["metadata"].setdefault("labels", {})
            new.setdefault("spec", {})
            edit(new)
            body = {
                "metadata": {
                    "resourceVersion": n["metadata"]["resourceVersion"],
                    "labels": new["metadata"]["labels"],
                },
                "spec": {
                    "taints": new["spec"].get("taints") or None,
                    "unschedulable": bool(new["spec"].get("unschedulable")),
                },
            }
            try:
                self.kube.request("PATCH", f"/api/v1/nodes/{node}", body, content_type=MERGE)
                return
            except Exception as exc:
                if getattr(exc, "status", None) != 409:
                    raise
        raise AssertionError(f"{node}: 50 conflicts in a row")


def _cond(status: Mapping[str, Any], type_: str) -> dict | None:
    return next(
        (
            c
            for c in status.get("conditions") or []
            if isinstance(c, dict) and c.get("type") == type_
        ),
        None,
    )


def who_acted(standin: NVSentinel, ours: Iterable[tuple[float, float, str]]) -> set[str]:
    """Nodes both acted on at once: an NVSentinel write (other than its hand-off and
    take-back) inside one of our runs ``(start, end, node)``."""
    both = set()
    for start, end, node in ours:
        for a in standin.acts_on(node):
            if a.what in ("quarantine", "drain", "remediate") and start <= a.at <= end:
                both.add(node)
    return both
