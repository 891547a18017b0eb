"""coordination.k8s.io Leases: the controller's leader lock and per-node locks.

Written here rather than taken from ``kubernetes.leaderelection`` because one
small primitive serves both uses: the library's LeaderElection owns its own
threads and callbacks and has no notion of short per-node locks. The same
per-node Lease is taken by ad-hoc ``reboot.yml``/``reimage.yml`` runs (module
``fleetmedic.fleet.node_lease``), so a person and the controller never work on
one node at once. Every write is a compare-and-swap on resourceVersion, so two
holders can never both believe they hold a lease.

Expiry is judged from the Lease's ``renewTime``, i.e. the holder's clock against ours,
unless the Lease is given an :class:`Observer`: then, as client-go's leader election does,
a Lease is expired once it has not changed for its duration on *this* process's
monotonic clock, so holders whose clocks differ cannot both hold it (the leader Lease of
a Slurm cluster, whose controllers may run on several bastions: docs/slurm.md). A Lease
whose ``renewTime`` is older than twice its duration is expired at first sight, so a
controller that starts long after the last holder died need not wait a whole duration;
that shortcut alone trusts clocks, to within one duration.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from fleetmedic.adapters.cluster import Store
from fleetmedic.errors import ConflictError, NotFoundError

MICROTIME = "%Y-%m-%dT%H:%M:%S.%fZ"


def _now() -> datetime:
    return datetime.now(UTC)


def _fmt(t: datetime) -> str:
    return t.strftime(MICROTIME)


def _parse(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.strptime(value.replace("+00:00", "Z"), MICROTIME).replace(tzinfo=UTC)
    except ValueError:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None


def node_lease_name(node: str, prefix: str = "fleetmedic-node-") -> str:
    """A valid Lease name for a node: DNS-1123, at most 253 chars, stable."""
    base = re.sub(r"[^a-z0-9.-]", "-", (prefix + node).lower()).strip("-.")
    if len(base) <= 253 and base == (prefix + node):
        return base
    digest = hashlib.sha256(node.encode()).hexdigest()[:10]
    return f"{base[:240].rstrip('-.')}-{digest}"


class Observer:
    """When each Lease was last seen to change (its resourceVersion), on this process's
    monotonic clock; shared by the Leases of one controller, so a node Lease looked at
    again by a new :class:`Lease` object keeps its history."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._seen: dict[tuple[str, str], tuple[str, float]] = {}
        self._lock = threading.Lock()

    def unchanged_for(self, namespace: str, name: str, lease: dict) -> float:
        """Seconds this Lease has been seen as it is now (0 the first time it is seen so)."""
        version = str((lease.get("metadata") or {}).get("resourceVersion", ""))
        now = self.clock()
        with self._lock:
            seen = self._seen.get((namespace, name))
            if seen is None or seen[0] != version:
                self._seen[(namespace, name)] = (version, now)
                return 0.0
            return now - seen[1]


class Lease:
    """One named Lease held by ``holder`` for ``duration`` seconds at a time.

    ``observer``: judge expiry by this process's clock (see the module doc).
    ``succeeds``: the identity of a leader this holder took over from: a Lease that one
    still holds is free to us (it stopped acting before its leader Lease expired)."""

    def __init__(
        self,
        kube: Store,
        namespace: str,
        name: str,
        holder: str,
        duration: int,
        *,
        observer: Observer | None = None,
        succeeds: str | None = None,
    ) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self.holder, self.duration = holder, duration
        self.observer, self.succeeds = observer, succeeds
        self.took_over_from: str | None = None  # whose (expired) Lease we took last
        self._mine: dict | None = None  # the Lease as we last wrote it, while we hold it

    def _body(self, existing: dict | None, acquire: bool) -> dict:
        now = _fmt(_now())
        spec = dict((existing or {}).get("spec") or {})
        if acquire:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (
                1 if existing else 0
            )
        spec.update(holderIdentity=self.holder, leaseDurationSeconds=self.duration, renewTime=now)
        meta = {"name": self.name, "namespace": self.namespace}
        if existing:
            meta["resourceVersion"] = existing["metadata"]["resourceVersion"]
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": spec,
        }

    def holder_of(self, lease: dict) -> str | None:
        """The current holder, or None when the lease is free or expired."""
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        renewed = _parse(spec.get("renewTime")) or _parse(spec.get("acquireTime"))
        duration = int(spec.get("leaseDurationSeconds") or 0)
        if not holder or renewed is None:
            return None
        if self.observer is None:
            return None if renewed + timedelta(seconds=duration) < _now() else holder
        unchanged = self.observer.unchanged_for(self.namespace, self.name, lease)
        if unchanged >= duration or renewed + timedelta(seconds=2 * duration) < _now():
            return None
        return holder

    def try_acquire(self) -> bool:
        """Take or renew the lease. False when someone else holds it or won a race.

        A holder renews with one PUT on the copy it wrote last (its
        resourceVersion is the precondition); only when that fails does it
        read the Lease again. Idle leaders thus cost one request per renewal.
        """
        if self._mine is not None:
            try:
                self._mine = self.kube.replace_lease(
                    self.namespace, self._body(self._mine, acquire=False)
                )
                return True
            except (ConflictError, NotFoundError):
                self._mine = None  # someone else wrote it: look before deciding
        try:
            existing = self.kube.get_lease(self.namespace, self.name)
        except NotFoundError:
            try:
                self._mine = self.kube.create_lease(self.namespace, self._body(None, acquire=True))
                return True
            except ConflictError:
                return False
        current = self.holder_of(existing)
        if current is not None and current == self.succeeds:
            current = None  # the leader we succeeded held it: it stopped acting
        if current not in (None, self.holder):
            return False
        before = (existing.get("spec") or {}).get("holderIdentity")
        try:
            self._mine = self.kube.replace_lease(
                self.namespace, self._body(existing, acquire=current is None)
            )
        except ConflictError:
            return False
        if current is None and before and before != self.holder:
            self.took_over_from = before
        return True

    def current_holder(self) -> str | None:
        try:
            return self.holder_of(self.kube.get_lease(self.namespace, self.name))
        except NotFoundError:
            return None

    def release(self) -> None:
        """Give the lease up if we hold it (so a successor need not wait it out)."""
        self._mine = None
        try:
            existing = self.kube.get_lease(self.namespace, self.name)
        except NotFoundError:
            return
        if (existing.get("spec") or {}).get("holderIdentity") != self.holder:
            return
        body = self._body(existing, acquire=False)
        body["spec"]["holderIdentity"] = None
        body["spec"]["renewTime"] = None
        try:
            self.kube.replace_lease(self.namespace, body)
        except ConflictError:
            pass
