"""Leases and ConfigMaps in a directory, for a fleet with no Kubernetes API server.

A Slurm-only fleet keeps node state on the node (Slurm's ``Extra``), but the controller also
uses Leases (leader lock, per-node locks: :mod:`fleetmedic.adapters.lease`) and ConfigMaps
(pause switch, breaker, domain incidents, replacements ledger). :class:`FileStore` has the
six methods of :class:`~fleetmedic.adapters.kube.Kube` those callers use, with the API
server's semantics (tests/integration/test_store_contract.py runs the same scenarios on
both and compares):

- writes are compare-and-swaps on ``metadata.resourceVersion`` (ConflictError when it
  moved; ``create_lease`` on an existing Lease too); a write that changes nothing keeps it;
- missing: NotFoundError (``get_config_map``: None); ``replace_lease`` creates a missing
  Lease, as the API server's PUT does; a bad name or body: PermanentError (its 400/422);
- objects look like the API server's: a resourceVersion that grows store-wide (as etcd's
  revision, so an object removed by hand and made again never reuses one), ``uid``,
  ``creationTimestamp``, Lease times as UTC MicroTime, null fields left out.

One difference, on purpose: a patch without ``resource_version`` creates a missing
ConfigMap (Kube's never does: RBAC cannot limit ``create`` by name, so the ConfigMap ships as
a manifest, and here no one ships one). :meth:`FileStore.ensure_config_map` makes it at
start, for readers that need it to exist (the replacements ledger).

Layout: ``<root>/<namespace>/{leases,configmaps}/<name>``, one JSON object per file (no
suffix: a name may have 253 characters, a file name 255). Names are checked as Kubernetes
checks them, so none leaves ``root``. A write goes to ``.tmp`` beside the object, is fsynced,
renamed over it, and the directory fsynced: a writer killed at any point leaves the old
object or the new, never a torn one. Readers take no lock (a rename is atomic); writers
read-compare-write under ``fcntl.flock`` on ``<root>/.lock`` (which keeps the revision
counter), so controller processes on one host get the API server's guarantees. A file that
cannot be read or parsed is :class:`StoreCorrupt` naming it, never "absent": an unreadable
leader Lease taken as free would make two leaders.

Shared between bastions (a Slurm cluster's controllers, docs/slurm.md "One acting
controller"), the directory is what Slurm's own HA asks of its StateSaveLocation: one
directory every bastion mounts, where a rename is seen by all and a lock taken on one host
holds on the others. On Linux NFS, ``flock`` is sent to the server as a whole-file lock
(NFSv4, or NFSv3 with its lock manager), except on mounts with ``local_lock=flock|all`` or
``nolock``, where each host locks alone: :func:`shared_problem` refuses those at start.
Every bastion has the same store identity (:meth:`FileStore.store_id`, a file in the
directory), which the acting controller names in its claim on slurmctld.

Hand-written because no well-kept library gives Lease/ConfigMap compare-and-swap on files:
``kubernetes.leaderelection`` needs an API server, filelock and fasteners are plain mutexes
without versioned objects, and SQLite would give transactions but none of the semantics
above (most of this module) while hiding each object from ``cat``, ``jq`` and ``rm``.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleetmedic.errors import (
    ConflictError,
    NotFoundError,
    PermanentError,
    TemporaryError,
    one_line,
)

LOCK_TIMEOUT = 15.0
"""Seconds a writer waits for the store's lock, as Kube's REQUEST_TIMEOUT: a stuck writer
(a hung shared filesystem) must never hang the controller; it gets a TemporaryError."""
MAX_CONFIGMAP_DATA = 1024 * 1024
"""Bytes of ConfigMap values, the API server's limit: a record that would not fit on
Kubernetes does not fit here either, so both stores fail alike."""
MICROTIME = "%Y-%m-%dT%H:%M:%S.%fZ"
TIMESTAMP = "%Y-%m-%dT%H:%M:%SZ"

_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_LABEL_RE = re.compile(_LABEL)
_CM_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_KINDS = {
    "lease": ("leases", "coordination.k8s.io/v1", "Lease"),
    "configmap": ("configmaps", "v1", "ConfigMap"),
}
_LEASE_TIMES = ("acquireTime", "renewTime")
_LEASE_FIELDS = {
    "holderIdentity": str,
    "leaseDurationSeconds": int,
    "leaseTransitions": int,
    "strategy": str,
    "preferredHolder": str,
    **dict.fromkeys(_LEASE_TIMES, str),
}


class StoreCorrupt(PermanentError):
    """A store file that cannot be read or is not an object this store wrote: a person
    must look (repair it or remove it; removing a Lease frees it)."""


def _check_namespace(what: str, namespace: object) -> str:
    if not isinstance(namespace, str) or len(namespace) > 63 or not _LABEL_RE.fullmatch(namespace):
        raise PermanentError(
            one_line(
                f"{what}: invalid namespace {namespace!r}: a DNS-1123 label (lowercase letters, "
                "digits and '-', at most 63)"
            )
        )
    return namespace


def _check_name(what: str, name: object) -> str:
    if not isinstance(name, str) or len(name) > 253 or not _SUBDOMAIN.fullmatch(name):
        raise PermanentError(
            one_line(
                f"{what}: invalid name {name!r}: a DNS-1123 subdomain (lowercase letters, "
                "digits, '-' and '.', at most 253)"
            )
        )
    return name


_MICROTIME_IN = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)")
"""What the API server takes as a MicroTime (Go's "2006-01-02T15:04:05.000000Z07:00"): six
fraction digits, and Z or an offset. It refuses anything else with 400, and so do we."""


def _microtime(what: str, field: str, value: str) -> str:
    bad = f"{what}: spec.{field}: not a MicroTime (RFC 3339, 6 fraction digits): {value!r}"
    if not _MICROTIME_IN.fullmatch(value):
        raise PermanentError(bad)
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:  # (the right shape, an impossible date)
        raise PermanentError(bad) from None
    return t.astimezone(UTC).strftime(MICROTIME)


def _lease_spec(what: str, spec: object) -> dict:
    """The Lease spec as the API server keeps it: known fields, nulls left out, times in
    UTC MicroTime; wrong types and non-positive durations refused as it refuses them."""
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise PermanentError(f"{what}: spec must be an object")
    out: dict[str, Any] = {}
    for field, kind in _LEASE_FIELDS.items():
        value = spec.get(field)
        if value is None:
            continue
        if not isinstance(value, kind) or isinstance(value, bool):
            a = "an integer" if kind is int else "a string"
            raise PermanentError(f"{what}: spec.{field}: must be {a}")
        out[field] = _microtime(what, field, str(value)) if field in _LEASE_TIMES else value
    if out.get("leaseDurationSeconds", 1) <= 0:
        raise PermanentError(f"{what}: spec.leaseDurationSeconds: must be greater than 0")
    if out.get("leaseTransitions", 0) < 0:
        raise PermanentError(f"{what}: spec.leaseTransitions: must be greater than or equal to 0")
    return out


def _check_data(what: str, data: object) -> dict[str, str | None]:
    if not isinstance(data, dict):
        raise PermanentError(f"{what}: data must be an object")
    for key, value in data.items():
        if not isinstance(key, str) or len(key) > 253 or not _CM_KEY.fullmatch(key):
            raise PermanentError(
                f"{what}: invalid data key {key!r}: letters, digits, '-', '_' and '.', at most 253"
            )
        if key in (".", ".."):
            raise PermanentError(f"{what}: invalid data key {key!r}")
        if value is not None and not isinstance(value, str):
            raise PermanentError(f"{what}: data.{key}: must be a string (or null to remove)")
    return data


class FileStore:
    """Leases and ConfigMaps under ``root``, with :class:`~fleetmedic.adapters.kube.Kube`'s
    methods and semantics (see the module's docstring)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.server = f"file store {self.root}"  # as Kube.server, for messages

    # -- leases ---------------------------------------------------------------------------
    def get_lease(self, namespace: str, name: str) -> dict:
        what = f"get lease {namespace}/{name}"
        obj = self._read(what, *self._path(what, "lease", namespace, name))
        if obj is None:
            raise NotFoundError(f"{what}: not found in {self.server}")
        return obj

    def create_lease(self, namespace: str, body: dict) -> dict:
        given = ((body or {}).get("metadata") or {}).get("name")
        what = f"create lease {namespace}/{given}"
        path, name = self._path(what, "lease", namespace, given)
        self._check_body_namespace(what, namespace, body)
        spec = _lease_spec(what, body.get("spec"))
        with self._locked(what) as lock:
            if self._read(what, path, name) is not None:
                raise ConflictError(f"{what}: already exists in {self.server}", delay=0.05)
            obj = self._new("lease", namespace, name, body)
            obj["spec"] = spec
            return self._write(what, lock, path, obj, None)

    def replace_lease(self, namespace: str, body: dict) -> dict:
        """Replace guarded by body.metadata.resourceVersion (ConflictError if it moved;
        PermanentError without one). A Lease that is gone is created, as the API server
        does on a PUT (so a holder whose Lease was deleted by hand gets it back)."""
        meta = (body or {}).get("metadata") or {}
        what = f"update lease {namespace}/{meta.get('name')}"
        path, name = self._path(what, "lease", namespace, meta.get("name"))
        self._check_body_namespace(what, namespace, body)
        version = meta.get("resourceVersion")
        spec = _lease_spec(what, body.get("spec"))
        with self._locked(what) as lock:
            old = self._read(what, path, name)
            if old is None:
                # the API server's Lease strategy allows create-on-update, whatever version
                # the body names (measured: tests/integration/test_store_contract.py)
                obj = self._new("lease", namespace, name, body)
                obj["spec"] = spec
                return self._write(what, lock, path, obj, None)
            if not version:
                raise PermanentError(
                    f"{what}: metadata.resourceVersion: must be specified for an update"
                )
            self._precondition(what, old, version, meta.get("uid"))
            new = copy.deepcopy(old)
            self._take_labels(new["metadata"], meta)
            new["spec"] = spec
            return self._write(what, lock, path, new, old)

    # -- config maps ----------------------------------------------------------------------
    def get_config_map(self, namespace: str, name: str) -> dict | None:
        what = f"get configmap {namespace}/{name}"
        return self._read(what, *self._path(what, "configmap", namespace, name))

    def patch_config_map_data(
        self,
        namespace: str,
        name: str,
        data: dict[str, str | None],
        resource_version: str | None = None,
    ) -> dict:
        """Merge ``data`` (a None value removes the key); with ``resource_version``, only
        if the ConfigMap has not changed since (else ConflictError; NotFoundError when it
        is gone). Without one, a missing ConfigMap is created (Kube's never is)."""
        what = f"patch configmap {namespace}/{name}"
        path, name = self._path(what, "configmap", namespace, name)
        _check_data(what, data)
        with self._locked(what) as lock:
            old = self._read(what, path, name)
            if old is None and resource_version:
                raise NotFoundError(f"{what}: not found in {self.server}")
            if old is not None and resource_version:
                self._precondition(what, old, resource_version, None)
            new = copy.deepcopy(old) if old else self._new("configmap", namespace, name, {})
            merged = dict(new.get("data") or {})
            for key, value in data.items():
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
            if sum(len(v.encode()) for v in merged.values()) > MAX_CONFIGMAP_DATA:
                raise PermanentError(f"{what}: data: must have at most {MAX_CONFIGMAP_DATA} bytes")
            new.pop("data", None)
            if merged:
                new["data"] = merged
            return self._write(what, lock, path, new, old)

    def ensure_config_map(self, namespace: str, name: str) -> dict:
        """The ConfigMap, created empty when missing (what shipping deploy/controller's
        manifest does on Kubernetes): call once at start for the pause ConfigMap."""
        return self.patch_config_map_data(namespace, name, {})

    def store_id(self) -> str:
        """This store's identity: a UUID made once (under the lock, so two bastions that
        start together make one) in ``<root>/.store-id``. Controllers that share the
        directory share it; one with a store of its own has another."""
        path = self.root / ".store-id"
        what = f"store identity {path}"
        with self._locked(what):
            try:
                text = path.read_text().strip()
            except FileNotFoundError:
                text = ""
            except OSError as exc:
                raise StoreCorrupt(f"{what}: cannot read: {exc.strerror}") from None
            if text:
                try:
                    return str(uuid.UUID(text))
                except ValueError:
                    raise StoreCorrupt(f"{what}: not a UUID ({one_line(text, 60)!r})") from None
            made = str(uuid.uuid4())
            tmp = self.root / ".store-id.tmp"
            try:
                tmp.write_text(made + "\n")
                with open(tmp, "rb") as f:
                    os.fsync(f.fileno())
                os.replace(tmp, path)
                _fsync_dir(self.root)
            except OSError as exc:
                raise TemporaryError(f"{what}: cannot write: {exc.strerror}", 5.0) from None
            return made

    # -- plumbing -------------------------------------------------------------------------
    def _path(self, what: str, kind: str, namespace: str, name: object) -> tuple[Path, str]:
        """The object's file and its (checked) name."""
        folder = self.root / _check_namespace(what, namespace) / _KINDS[kind][0]
        checked = _check_name(what, name)
        return folder / checked, checked

    @staticmethod
    def _check_body_namespace(what: str, namespace: str, body: dict) -> None:
        given = (body.get("metadata") or {}).get("namespace")
        if given and given != namespace:
            raise PermanentError(
                f"{what}: the namespace of the object ({given}) does not match the request's"
            )

    @staticmethod
    def _precondition(what: str, old: dict, version: str, uid: str | None) -> None:
        meta = old["metadata"]
        if uid and uid != meta.get("uid"):
            raise ConflictError(f"{what}: precondition failed: uid {uid} is gone", delay=0.05)
        if str(version) != meta["resourceVersion"]:
            raise ConflictError(
                f"{what}: the object has been modified (resourceVersion {version} is now "
                f"{meta['resourceVersion']}); read it again",
                delay=0.05,
            )

    @staticmethod
    def _take_labels(meta: dict, given: dict) -> None:
        for field in ("labels", "annotations"):
            if given.get(field):
                meta[field] = dict(given[field])
            else:
                meta.pop(field, None)

    def _new(self, kind: str, namespace: str, name: str, body: dict) -> dict:
        _, api_version, kind_name = _KINDS[kind]
        meta: dict[str, Any] = {
            "name": name,
            "namespace": namespace,
            "uid": str(uuid.uuid4()),
            "creationTimestamp": datetime.now(UTC).strftime(TIMESTAMP),
        }
        self._take_labels(meta, body.get("metadata") or {})
        return {"apiVersion": api_version, "kind": kind_name, "metadata": meta}

    def _read(self, what: str, path: Path, name: str) -> dict | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreCorrupt(f"{what}: cannot read {path}: {exc.strerror}") from None
        try:
            with os.fdopen(fd, "rb") as f:
                raw = f.read()
        except OSError as exc:
            raise StoreCorrupt(f"{what}: cannot read {path}: {exc.strerror}") from None
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            raise StoreCorrupt(f"{what}: {path} is not JSON ({exc}); repair or remove it") from None
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if (
            not isinstance(meta, dict)
            or meta.get("name") != name
            or not str(meta.get("resourceVersion", "")).isdigit()
        ):
            raise StoreCorrupt(
                f"{what}: {path} is not an object of this store (metadata.name and "
                "resourceVersion); repair or remove it"
            )
        data, spec = obj.get("data", {}), obj.get("spec", {})
        if not isinstance(spec, dict) or not (
            isinstance(data, dict) and all(isinstance(v, str) for v in data.values())
        ):
            raise StoreCorrupt(
                f"{what}: {path}: spec must be an object and data an object of strings; "
                "repair or remove it"
            )
        return obj

    @contextlib.contextmanager
    def _locked(self, what: str) -> Iterator[int]:
        """The store's write lock (a fresh open file, so threads of one process exclude each
        other too); yields its descriptor, whose content is the revision counter."""
        try:
            self._mkdirs(self.root)
            fd = os.open(
                self.root / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
            )
        except OSError as exc:
            raise TemporaryError(
                f"{what}: cannot open {self.root}/.lock: {exc.strerror}", 5.0
            ) from None
        try:
            deadline, pause = time.monotonic() + LOCK_TIMEOUT, 0.001
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise TemporaryError(
                            f"{what}: {self.root}/.lock held by another writer for "
                            f"{LOCK_TIMEOUT:.0f}s",
                            2.0,
                        ) from None
                    time.sleep(pause)
                    pause = min(pause * 2, 0.05)
                except OSError as exc:
                    raise PermanentError(
                        f"{what}: cannot lock {self.root}/.lock: {exc.strerror} (the store "
                        "needs a filesystem where flock works)"
                    ) from None
            yield fd
        finally:
            os.close(fd)  # releases the lock

    def _write(self, what: str, lock: int, path: Path, obj: dict, old: dict | None) -> dict:
        """Write ``obj`` at ``path`` with the next revision, unless it equals ``old`` (then
        ``old`` is returned unchanged, as the API server skips a write that changes nothing)."""
        if old is not None and _sans_version(obj) == _sans_version(old):
            return old
        try:
            counter = int(os.pread(lock, 32, 0).strip() or b"0")
        except ValueError:
            counter = 0  # a torn counter: the object's own revision still orders its writes
        revision = max(counter, int((old or {}).get("metadata", {}).get("resourceVersion", 0))) + 1
        obj["metadata"]["resourceVersion"] = str(revision)
        try:
            count = f"{revision}\n".encode()
            os.pwrite(lock, count, 0)
            os.ftruncate(lock, len(count))
            self._mkdirs(path.parent)
            tmp = path.parent / ".tmp"
            fd = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
            )
            with os.fdopen(fd, "wb") as f:
                f.write(json.dumps(obj, sort_keys=True).encode() + b"\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            _fsync_dir(path.parent)
        except OSError as exc:
            raise TemporaryError(f"{what}: cannot write {path}: {exc.strerror}", 5.0) from None
        return obj

    def _mkdirs(self, folder: Path) -> None:
        """Make ``folder`` and its missing parents, each made durable in its parent."""
        if folder.is_dir():
            return
        self._mkdirs(folder.parent)
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            if not folder.is_dir():
                raise
            return
        _fsync_dir(folder.parent)


NFS_TYPES = ("nfs", "nfs4")
LOCAL_LOCKS = ("local_lock=flock", "local_lock=all", "nolock")


def shared_problem(root: Path, mountinfo: str | None = None) -> str | None:
    """Why ``root`` cannot hold a store shared between hosts, or None: an NFS mount whose
    locks stay on each host (see the module doc). ``mountinfo``: /proc/self/mountinfo's
    text (read when None). Other filesystems pass: a local disk is right for one bastion,
    and a second bastion with a store of its own is caught by the claim on slurmctld."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return None
    path = os.path.realpath(root)
    best: tuple[str, str, str] | None = None  # mount point, type, options
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 6 or len(tail) < 3:
            continue
        point = fields[4].replace("\\040", " ")
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) > len(best[0])):
            best = (point, tail[0], f"{fields[5]},{tail[2]}")
    if best is None or best[1] not in NFS_TYPES:
        return None
    opts = best[2].split(",")
    bad = [o for o in LOCAL_LOCKS if o in opts]
    if bad:
        return (
            f"{root} is on NFS ({best[0]}) mounted with {bad[0]}: its locks are not seen by "
            "other hosts, so two bastions could both lead; remount with local_lock=none "
            "(and without nolock)"
        )
    return None


def _sans_version(obj: dict) -> dict:
    meta = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
    return dict(obj, metadata=meta)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
