"""Who may act: the leader Lease, and one Lease per node while it is worked on.

    leadership.leading()   # take or renew when due; True while this controller leads
    leadership.hold(node)  # the node's Lease, or False while someone else holds it
    leadership.let_go(node)
    leadership.resign()    # at shutdown

With ``leader_election.enabled: false`` this controller always leads (one controller per
pool is then the operator's promise), but node Leases are still taken and renewed, so an
ad-hoc ``reboot.yml`` run and the controller never work on one node at once.

A leader that cannot renew within ``renew_deadline`` stops leading before its Lease can
expire and calls ``on_lost`` (the loop cancels its running playbooks; their phases stay
``running`` on the Node, so the next leader resumes them).

With ``observe`` (a Slurm cluster's controllers on several bastions, docs/slurm.md) every
Lease's expiry is judged by this process's clock (adapters/lease.py's Observer), and a
leader that took over from a dead one takes that one's node Leases at once instead of
waiting them out: the dead leader stopped acting before its leader Lease could expire.
``guard``, when given, runs after every take or renewal of the leader Lease (the cluster
claim on slurmctld, kinds/slurmha.py); a PermanentError from it means another
controller acts on this cluster: this one stops leading for good and raises it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable

from fleetmedic.adapters.cluster import Cluster
from fleetmedic.adapters.lease import Lease, Observer, node_lease_name
from fleetmedic.controller import sdnotify
from fleetmedic.errors import FleetmedicError, PermanentError
from fleetmedic.model.config.sections import LeaderElectionConfig

log = logging.getLogger(__name__)


def default_identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Leadership:
    def __init__(
        self,
        cluster: Cluster,
        cfg: LeaderElectionConfig,
        identity: str,
        *,
        on_gained: Callable[[], None] = lambda: None,
        on_lost: Callable[[], None] = lambda: None,
        on_change: Callable[[bool], None] = lambda leading: None,
        observe: bool = False,
        guard: Callable[[], None] | None = None,
    ) -> None:
        self.cluster, self.cfg, self.identity = cluster, cfg, identity
        self.on_gained, self.on_lost, self.on_change = on_gained, on_lost, on_change
        self.observer = Observer() if observe else None
        self.guard = guard
        self.predecessor: str | None = None  # the dead leader this one took over from
        self.lease = (
            Lease(
                cluster,
                cfg.namespace,
                cfg.lease_name,
                identity,
                max(1, int(cfg.lease_duration)),
                observer=self.observer,
            )
            if cfg.enabled
            else None
        )
        self._leading = self.lease is None
        self._renewed = 0.0
        self._next_renew = 0.0
        self._next_node_renew = 0.0
        self._lock = threading.Lock()
        self._nodes: dict[str, tuple[Lease, threading.Lock]] = {}

    @property
    def elected(self) -> bool:
        """True when a leader Lease is in use (leader election enabled)."""
        return self.lease is not None

    @property
    def is_leading(self) -> bool:
        """Whether this controller led at the main loop's last look (no API call; for
        other threads, which must not renew the Lease themselves)."""
        return self._leading

    # -- the leader Lease ----------------------------------------------------------
    def leading(self) -> bool:
        """Take or renew the leader Lease when due (and the node Leases); True while
        this controller leads."""
        now = time.monotonic()
        if self.lease is not None and now >= self._next_renew:
            self._next_renew = now + self.cfg.retry_period
            self._try_lead(now)
        elif self.lease is None and self.guard is not None:
            self._guarded()  # (without election: this controller always acts; it is due itself)
        if self._leading:
            self._renew_nodes(now)
        self.on_change(self._leading)
        return self._leading

    def _try_lead(self, now: float) -> None:
        assert self.lease is not None
        try:
            ok = self.lease.try_acquire()
        except FleetmedicError as exc:
            log.warning("leader Lease: %s", exc)
            ok = False
        if ok and self.guard is not None:
            self._guarded()
        if ok:
            self._renewed = now
            if not self._leading:
                if self.lease.took_over_from:
                    self.predecessor = self.lease.took_over_from
                log.info(
                    "leading as %s (Lease %s/%s%s)",
                    self.identity,
                    self.cfg.namespace,
                    self.cfg.lease_name,
                    f", taken over from {self.predecessor}" if self.predecessor else "",
                )
                sdnotify.notify(f"STATUS=leading as {self.identity}")
                self._leading = True
                self.on_gained()
        elif self._leading and now - self._renewed > self.cfg.renew_deadline:
            log.error(
                "lost the leader Lease (not renewed within %.0fs): cancelling running work",
                self.cfg.renew_deadline,
            )
            self._leading = False
            self.on_lost()
        elif not self._leading:
            sdnotify.notify("STATUS=standing by: another controller holds the leader Lease")

    def _guarded(self) -> None:
        """Run the guard; on a PermanentError stop acting at once, give the Lease up, and
        raise it (the loop ends with that one line)."""
        assert self.guard is not None
        try:
            self.guard()
        except PermanentError:
            was, self._leading = self._leading, False
            if self.lease is not None:
                try:
                    self.lease.release()
                except FleetmedicError as exc:
                    log.warning("could not release the leader Lease: %s", exc)
            if was:
                self.on_lost()
            self.on_change(False)
            raise
        except FleetmedicError as exc:
            log.warning("leader guard: %s (trying again at the next renewal)", exc)

    def lead_within(self, seconds: float) -> None:
        """Become the leader within ``seconds`` or raise PermanentError naming the holder."""
        deadline = time.monotonic() + seconds
        while not self.leading():
            if time.monotonic() > deadline:
                holder = self.lease.current_holder() if self.lease else None
                raise PermanentError(
                    f"another controller ({holder or 'unknown'}) holds the "
                    f"leader Lease {self.cfg.namespace}/{self.cfg.lease_name}"
                )
            time.sleep(min(1.0, self.cfg.retry_period))
            self._next_renew = 0.0

    def next_due(self) -> float:
        """Seconds until a Lease needs renewing (the loop wakes by then)."""
        now = time.monotonic()
        due = [self._next_renew] if self.lease is not None else []
        with self._lock:
            if self._nodes:
                due.append(self._next_node_renew)
        return max(0.0, min(due) - now) if due else float("inf")

    def resign(self) -> None:
        """Give the leader Lease up (at shutdown), so a standby takes over at once."""
        if self.lease is not None and self._leading:
            try:
                self.lease.release()
            except FleetmedicError as exc:
                log.warning("could not release the leader Lease: %s", exc)
        self._leading = self.lease is None
        self.on_change(False)

    # -- node Leases ---------------------------------------------------------------
    @property
    def hold_retry(self) -> float:
        """How long to leave a node alone whose Lease someone else holds."""
        return min(self.cfg.node_lease_duration, 15.0)

    def hold(self, node: str) -> bool:
        """Take ``node``'s Lease; False (logged) while someone else holds it."""
        lease = Lease(
            self.cluster,
            self.cfg.namespace,
            node_lease_name(node),
            self.identity,
            max(1, int(self.cfg.node_lease_duration)),
            observer=self.observer,
            succeeds=self.predecessor if self.observer else None,
        )
        if not lease.try_acquire():
            log.info("%s: node Lease held by %s; waiting", node, lease.current_holder())
            return False
        with self._lock:
            if not self._nodes:
                self._next_node_renew = time.monotonic() + self._node_renew_every()
            self._nodes[node] = (lease, threading.Lock())
        return True

    def let_go(self, node: str) -> None:
        with self._lock:
            entry = self._nodes.get(node)
        if entry is None:
            return
        lease, guard = entry
        with guard:  # never give up a Lease while it is being renewed
            with self._lock:
                self._nodes.pop(node, None)
            try:
                lease.release()
            except FleetmedicError as exc:
                log.warning("%s: could not release the node Lease: %s", node, exc)

    def _node_renew_every(self) -> float:
        return max(1.0, self.cfg.node_lease_duration / 3)

    def _renew_nodes(self, now: float) -> None:
        if now < self._next_node_renew:
            return
        self._next_node_renew = now + self._node_renew_every()
        with self._lock:
            held = list(self._nodes.items())
        for name, entry in held:
            lease, guard = entry
            with guard:
                with self._lock:
                    if self._nodes.get(name) is not entry:
                        continue  # let go meanwhile
                try:
                    if not lease.try_acquire():
                        log.warning(
                            "node Lease %s was taken by %s while we worked",
                            lease.name,
                            lease.current_holder(),
                        )
                except FleetmedicError as exc:
                    log.warning("node Lease %s: %s", lease.name, exc)
