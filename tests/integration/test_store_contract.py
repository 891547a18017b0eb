"""One contract, two stores: the same Lease and ConfigMap scenarios run against the real
kube-apiserver (fleetmedic.adapters.kube) and against the file store a Slurm-only fleet
uses (fleetmedic.adapters.filestore), and must come out the same: the same exceptions, the
same objects back, a resourceVersion that moves (or stays) at the same steps.

Each scenario writes a transcript: one entry per call, the error's class name or a summary
of the object returned. The test compares the two transcripts whole, so a difference names
the step. The one difference on purpose (a patch creates a missing ConfigMap in the file
store only) has its own test below."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fleetmedic.adapters import kube as kube_adapter
from fleetmedic.adapters.filestore import FileStore
from fleetmedic.adapters.lease import Lease
from fleetmedic.errors import FleetmedicError, NotFoundError

pytestmark = pytest.mark.kube

T1 = "2026-11-27T03:04:05.123456Z"
T2 = "2026-11-27T05:04:06.500000+02:00"  # an offset: stored as UTC MicroTime
SHORT = "2026-11-27T03:04:06.5Z"  # fewer fraction digits: the API server refuses it (400)


class Transcript:
    """What each call of a scenario gave, comparable between stores."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, Any]] = []
        self.last_rv: dict[str, int] = {}

    def __call__(self, step: str, fn: Callable[[], Any]) -> Any:
        try:
            got = fn()
        except FleetmedicError as exc:
            # a subclass only the file store has (StoreCorrupt) never occurs in these scenarios
            self.steps.append((step, type(exc).__name__))
            return None
        self.steps.append((step, self.summary(got)))
        return got

    def summary(self, obj: Any) -> Any:
        if not isinstance(obj, dict):
            return obj
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{obj.get('kind')}/{meta.get('name')}"
        rv = int(meta["resourceVersion"])
        before = self.last_rv.get(key)
        self.last_rv[key] = rv
        return {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "has uid and creationTimestamp": bool(
                meta.get("uid") and meta.get("creationTimestamp")
            ),
            "labels": meta.get("labels"),
            "spec": obj.get("spec"),
            "data": obj.get("data"),
            "resourceVersion": "new"
            if before is None
            else "moved"
            if rv > before
            else "same"
            if rv == before
            else "went back",
        }


def lease(name: str, rv: str | None = None, **spec: Any) -> dict:
    meta: dict[str, Any] = {"name": name}
    if rv:
        meta["resourceVersion"] = rv
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}


def rv_of(obj: dict | None) -> str:
    return (obj or {}).get("metadata", {}).get("resourceVersion", "0")


def lease_scenario(store: Any, t: Transcript, ns: str) -> None:
    t("get missing", lambda: store.get_lease(ns, "l1"))
    # a PUT creates a missing Lease (its strategy allows create-on-update), whatever version
    t("replace missing", lambda: store.replace_lease(ns, lease("l0", rv="1", holderIdentity="a")))
    t("replace missing, no version", lambda: store.replace_lease(ns, lease("l00")))
    made = t(
        "create",
        lambda: store.create_lease(
            ns,
            lease(
                "l1",
                holderIdentity="a",
                leaseDurationSeconds=30,
                acquireTime=T1,
                renewTime=T2,
                leaseTransitions=0,
            ),
        ),
    )
    t("create again", lambda: store.create_lease(ns, lease("l1", holderIdentity="b")))
    t("not a MicroTime", lambda: store.create_lease(ns, lease("l3", renewTime=SHORT)))
    t("get", lambda: store.get_lease(ns, "l1"))
    renewed = t(
        "renew",
        lambda: store.replace_lease(
            ns, lease("l1", rv_of(made), holderIdentity="a", leaseDurationSeconds=30, renewTime=T1)
        ),
    )
    t(
        "replace with a stale version",
        lambda: store.replace_lease(ns, lease("l1", rv_of(made), holderIdentity="b")),
    )
    t(
        "replace without a version",
        lambda: store.replace_lease(ns, lease("l1", holderIdentity="b", leaseDurationSeconds=30)),
    )
    same = dict(renewed or {}, metadata={"name": "l1", "resourceVersion": rv_of(renewed)})
    unchanged = t("replace that changes nothing", lambda: store.replace_lease(ns, same))
    t(
        "release (nulls)",
        lambda: store.replace_lease(
            ns,
            lease(
                "l1", rv_of(unchanged), holderIdentity=None, leaseDurationSeconds=30, renewTime=None
            ),
        ),
    )
    t(
        "labels kept",
        lambda: store.create_lease(
            ns,
            {**lease("l2", holderIdentity="x"), "metadata": {"name": "l2", "labels": {"a": "b"}}},
        ),
    )
    t("bad name", lambda: store.create_lease(ns, lease("Bad_Name", holderIdentity="x")))
    t("zero duration", lambda: store.create_lease(ns, lease("l3", leaseDurationSeconds=0)))
    t("negative transitions", lambda: store.create_lease(ns, lease("l3", leaseTransitions=-1)))
    t("still absent", lambda: store.get_lease(ns, "l3"))


def config_map_scenario(store: Any, t: Transcript, ns: str) -> None:
    t("get missing", lambda: store.get_config_map(ns, "absent"))
    t(
        "patch missing with a version",
        lambda: store.patch_config_map_data(ns, "absent", {"a": "1"}, resource_version="1"),
    )
    first = t("patch", lambda: store.patch_config_map_data(ns, "cm", {"a": "1", "b": "2"}))
    second = t("merge", lambda: store.patch_config_map_data(ns, "cm", {"c": "3", "a": None}))
    t("remove absent key", lambda: store.patch_config_map_data(ns, "cm", {"zz": None}))
    t(
        "same data, same version",
        lambda: store.patch_config_map_data(ns, "cm", {"c": "3"}, resource_version=rv_of(second)),
    )
    t(
        "stale version",
        lambda: store.patch_config_map_data(ns, "cm", {"d": "4"}, resource_version=rv_of(first)),
    )
    t(
        "current version",
        lambda: store.patch_config_map_data(ns, "cm", {"d": "4"}, resource_version=rv_of(second)),
    )
    t("get", lambda: store.get_config_map(ns, "cm"))
    t("not a string", lambda: store.patch_config_map_data(ns, "cm", {"n": 1}))
    t("bad key", lambda: store.patch_config_map_data(ns, "cm", {"a/b": "x"}))
    t("too big", lambda: store.patch_config_map_data(ns, "cm", {"big": "x" * (1024 * 1024 + 1)}))
    t("all keys removed", lambda: store.patch_config_map_data(ns, "cm", dict.fromkeys("bcd")))
    t("get after", lambda: store.get_config_map(ns, "cm"))


def lease_primitive_scenario(store: Any, t: Transcript, ns: str) -> None:
    """fleetmedic.adapters.lease over the store: who holds, who is refused."""
    a = Lease(store, ns, "leader", "a", 30)
    b = Lease(store, ns, "leader", "b", 30)
    t("a takes", a.try_acquire)
    t("b refused", b.try_acquire)
    t("a renews", a.try_acquire)
    t("holder", b.current_holder)
    t("a releases", a.release)
    t("free", b.current_holder)
    t("b takes", b.try_acquire)
    t("a refused", a.try_acquire)
    t("transitions", lambda: store.get_lease(ns, "leader")["spec"]["leaseTransitions"])


@pytest.fixture(scope="module")
def api(kube):
    return kube_adapter.connect(kube.kubeconfig)


def run_both(kube, api, tmp_path: Path, scenario, seed_config_map: bool = False) -> None:
    """``scenario`` against the API server and against a fresh file store, each in a
    namespace of its own; the transcripts must be identical (and not trivial)."""
    namespace = f"store-contract-{uuid.uuid4().hex[:6]}"
    kube.ensure_namespace(namespace)
    transcripts = []
    for store in (api, FileStore(tmp_path / "store")):
        t = Transcript()
        if seed_config_map:
            ensure_config_map(store, namespace, "cm")
            t.summary(store.get_config_map(namespace, "cm"))  # the baseline version
        scenario(store, t, namespace)
        transcripts.append(t.steps)
    kube_steps, file_steps = transcripts
    for (step, on_kube), (_, on_file) in zip(kube_steps, file_steps, strict=True):
        assert on_file == on_kube, (
            f"{step}: the API server gave {on_kube}, the file store {on_file}"
        )
    assert len({str(v) for _, v in kube_steps}) > 3


def ensure_config_map(store: Any, namespace: str, name: str) -> None:
    """The empty ConfigMap a Kubernetes deploy ships (deploy/controller/configmap.yaml)
    and the file store makes with ensure_config_map."""
    if isinstance(store, FileStore):
        store.ensure_config_map(namespace, name)
        return
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
    store._call(
        f"create configmap {namespace}/{name}",
        "POST",
        f"/api/v1/namespaces/{namespace}/configmaps",
        body=body,
    )


def test_leases_behave_the_same(kube, api, tmp_path):
    run_both(kube, api, tmp_path, lease_scenario)


def test_config_maps_behave_the_same(kube, api, tmp_path):
    run_both(kube, api, tmp_path, config_map_scenario, seed_config_map=True)


def test_the_lease_primitive_behaves_the_same(kube, api, tmp_path):
    run_both(kube, api, tmp_path, lease_primitive_scenario)


def test_a_patch_creates_a_missing_config_map_only_in_the_file_store(kube, api, tmp_path):
    """The documented difference: on Kubernetes the ConfigMap is shipped as a manifest
    (RBAC grants patch on one name, never create); in the file store no one ships it, so
    the first patch makes it, as ensure_config_map does at start."""
    namespace = f"store-contract-{uuid.uuid4().hex[:6]}"
    kube.ensure_namespace(namespace)
    with pytest.raises(NotFoundError):
        api.patch_config_map_data(namespace, "never-shipped", {"a": "1"})
    assert api.get_config_map(namespace, "never-shipped") is None
    store = FileStore(tmp_path / "store")
    made = store.patch_config_map_data(namespace, "never-shipped", {"a": "1"})
    assert store.get_config_map(namespace, "never-shipped") == made
    assert made["data"] == {"a": "1"}
