"""The runs of domain playbooks (``domains[].action: {playbook: ...}``) and of the verify
after them, each on a thread of its own, off the main loop: the domain keeper
(domainkeeper.py) decides and records (policy/domains_play.py), this module runs.

- One ansible-runner run over all of an incident's nodes (adapters/runner.py, as every
  ladder phase; routed to the execution node the nodes' label names when they all name
  the same one, else here), with the incident's request id as ``fleetmedic_request_id``.
- The node Leases of all its nodes are held for the run (as the ladder holds one per
  node; the keeper takes them before it records the start, the run gives them back): a
  person's playbook on one of them makes the run wait.
- After the verify, each node that passed is returned to service here (the ladder's
  return, through the same Recorder as the workers), before the result is handed back.
- A cancelled run (the controller stopping, or no longer leading) hands back nothing: its
  record still says ``running`` (or ``verify``), and the next start resumes it.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from fleetmedic import logcontext
from fleetmedic.adapters import runner
from fleetmedic.controller.parts import Context
from fleetmedic.errors import FleetmedicError, one_line
from fleetmedic.model.hostvars import controller_host_vars
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy import domains_play
from fleetmedic.policy.actions import LOST, Stale
from fleetmedic.policy.domains_play import Play

log = logging.getLogger(__name__)
RUN, VERIFY = "run", "verify"


@dataclass(frozen=True)
class Done:
    """A run's result, for the keeper: ``results`` per node (ok | failed | unreachable |
    timeout | lost); ``error``: the run could not be judged (try again later)."""

    incident: str  # the incident's id
    what: str  # run | verify
    run_id: str
    results: dict[str, str] = field(default_factory=dict)
    message: str = ""
    error: str = ""
    returned: tuple[str, ...] = ()  # (verify) nodes written back to service


class DomainPlayer:
    def __init__(self, ctx: Context) -> None:
        """The keeper takes the nodes' Leases before a run starts; the run gives them back
        (``ctx.leadership.let_go``)."""
        self.cfg, self.write, self.clock, self.wake = ctx.cfg, ctx.write, ctx.clock, ctx.wake
        self.hold, self._let_go = ctx.leadership.hold, ctx.leadership.let_go
        self.done: queue.Queue[Done] = queue.Queue()
        self._running: dict[str, threading.Event] = {}  # incident id -> its run's cancel
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    @classmethod
    def if_configured(cls, ctx: Context) -> DomainPlayer | None:
        """The player when a domain has a playbook (``action: {playbook: ...}``), else None."""
        return cls(ctx) if any(d.playbook for d in ctx.cfg.domains) else None

    def busy(self, incident: str) -> bool:
        with self._lock:
            return incident in self._running

    def start(
        self,
        what: str,
        incident: str,
        name: str,
        play: Play,
        views: Sequence[NodeView],
        run_id: str,
    ) -> None:
        cancel = threading.Event()
        with self._lock:
            self._running[incident] = cancel
        t = logcontext.thread(
            self._play,
            args=(what, incident, name, play, list(views), run_id, cancel),
            name=f"fleetmedic-domain-{what}",
        )
        self._threads = [x for x in self._threads if x.is_alive()] + [t]
        t.start()

    def let_go(self, names: Sequence[str]) -> None:
        for n in names:
            self._let_go(n)

    def active(self) -> bool:
        """Some run is under way (``run --once`` waits for it)."""
        with self._lock:
            return bool(self._running)

    def results(self) -> list[Done]:
        out = []
        while True:
            try:
                out.append(self.done.get_nowait())
            except queue.Empty:
                return out

    def cancel(self) -> None:
        """Stop every run (the controller stops or lost the lead): each resumes later."""
        with self._lock:
            for event in self._running.values():
                event.set()

    def cancel_one(self, incident: str) -> None:
        with self._lock:
            event = self._running.get(incident)
        if event is not None:
            event.set()

    def shutdown(self, grace: float) -> None:
        self.cancel()
        for t in self._threads:
            t.join(grace)

    # -- on the run's thread ---------------------------------------------------------------
    def _play(
        self,
        what: str,
        incident: str,
        name: str,
        play: Play,
        views: list[NodeView],
        run_id: str,
        cancel: threading.Event,
    ) -> None:
        try:
            done = self._run(what, incident, name, play, views, run_id, cancel)
            if done is not None:
                self._hand_back(done)
        except FleetmedicError as exc:  # the run dir, ansible-playbook missing, the API
            log.warning("domain incident %s: %s not judged: %s", name, what, exc)
            self._hand_back(Done(incident, what, run_id, error=one_line(exc)))
        except Exception as exc:
            log.exception("domain incident %s: unexpected error in its %s", name, what)
            self._hand_back(Done(incident, what, run_id, error=one_line(exc)))
        finally:
            self.let_go([v.name for v in views])
            with self._lock:
                self._running.pop(incident, None)
            self.wake()

    def _hand_back(self, done: Done) -> None:
        self.done.put(done)

    def _run(
        self,
        what: str,
        incident: str,
        name: str,
        play: Play,
        views: list[NodeView],
        run_id: str,
        cancel: threading.Event,
    ) -> Done | None:
        cfg = self.cfg
        if what == RUN:
            book = cfg.ansible.playbook_dir / play.playbook
            timeout = self._timeout(name)
        else:
            verify = cfg.ladder.playbooks.verify
            book = cfg.playbook_path(verify)
            timeout = verify.timeout or cfg.ansible.job_timeout
        targets = []
        for v in views:
            address, hostvars = controller_host_vars(v)
            targets.append(runner.Target(v.name, address, hostvars))
        request = domains_play.request_id(incident)
        log.warning(
            "domain incident %s: %s %s over %s (request %s, run %s)",
            name,
            "playbook" if what == RUN else "verify",
            book.name,
            ", ".join(v.name for v in views),
            request,
            run_id,
        )
        result = runner.run_playbook(
            book,
            targets,
            cfg.ansible,
            timeout=timeout,
            run_id=run_id,
            cancel=cancel.is_set,
            extravars={
                "fleetmedic_request_id": request,
                "fleetmedic_incident": incident,
                "fleetmedic_domain": name,
                "fleetmedic_node_lease": False,  # (held here, as the ladder holds them)
            },
            via=self._via(views),
        )
        if cancel.is_set() or result.status == "canceled":
            log.info(
                "domain incident %s: %s run %s cancelled; resumed later",
                name,
                "playbook" if what == RUN else "verify",
                run_id,
            )
            return None
        results = {
            n: (LOST if result.status == LOST else h.status) for n, h in result.hosts.items()
        }
        failing = [f"{n}: {h.message}" for n, h in result.hosts.items() if not h.ok]
        message = "; ".join(failing)[:300]
        log.warning(
            "domain incident %s: %s run %s ended (%s): %s",
            name,
            "playbook" if what == RUN else "verify",
            run_id,
            result.status,
            ", ".join(f"{n} {s}" for n, s in sorted(results.items())),
        )
        if what == RUN:
            return Done(incident, what, run_id, results, message)
        back = []
        ended = domains_play.verified(play, results, self.clock())
        by_name = {v.name: v for v in views}
        for n in ended.passed:
            v = by_name[n]
            if not domains_play.still_fenced(v):
                continue
            try:
                self.write(domains_play.returning(v, name, ended, self.clock(), cfg))
                back.append(n)
            except Stale as exc:
                log.info("%s: not returned by domain incident %s: %s", n, name, exc)
        return Done(incident, what, run_id, results, message, returned=tuple(back))

    def _timeout(self, name: str) -> float:
        key = name.split("=", 1)[0]
        d = next((d for d in self.cfg.domains if d.key == key), None)
        book = d.playbook if d is not None else None
        return (book.timeout if book else None) or self.cfg.ansible.job_timeout

    def _via(self, views: Sequence[NodeView]) -> runner.Via | None:
        """The execution node every one of the nodes routes to (None: here). Nodes that
        route to different ones run here: one run per incident is what keeps it once."""
        ex = self.cfg.executor
        routes = {ex.route(v.labels) for v in views}
        if len(routes) != 1 or ex.receptor is None:
            return None
        node = routes.pop()
        return runner.Via(node, ex.receptor) if node else None
