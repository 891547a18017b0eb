"""NVSentinel's hand-off in the controller: the ExternalRemediationRequest responder.

One part of the loop (controller/parts.py), with its own two threads
(``nvsentinel.enabled``; off by default):

- an informer of ERRs (list once, then watch with bookmarks: controller/watcher.py's);
- a worker that brings requests one step further (policy/handoff.py decides, this does):
  claim a released node (a Node write through the Recorder, so the ladder's cache sees it
  at once), report the rung under way and complete the request (ERR status writes,
  adapters/nvsentinel.py), hold a node whose request was withdrawn.

The worker wakes when an ERR changes, when the Recorder wrote a node that answers a
request (:meth:`Responder.written`, the listener the loop hands the Recorder: every rung's
start and end is such a write, so progress needs no hook in the ladder), on each of the
loop's cycles (:meth:`observe`: a node watch event, a worker's end), and at least every
``RESYNC`` seconds. Everything it
decides from is on the ERR and the Node, so a restarted controller carries on where the
last one stopped: a finished ladder's request is completed on the next pass.

It acts only while the controller leads (``acting``); in a dry run it logs what it would do.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from datetime import datetime

from fleetmedic import logcontext
from fleetmedic.adapters.cluster import Cluster
from fleetmedic.adapters.nvsentinel import Requests, requests_of
from fleetmedic.controller.parts import Context, Look, Part
from fleetmedic.controller.watcher import NodeWatcher
from fleetmedic.errors import ConfigError, FleetmedicError, NotFoundError
from fleetmedic.model import keys
from fleetmedic.model.config import Config
from fleetmedic.model.nodestate import NodeView
from fleetmedic.model.nodestate import view as view_of
from fleetmedic.policy import handoff, nvsentinel
from fleetmedic.policy.actions import Stale, Update
from fleetmedic.policy.nvsentinel import Request
from fleetmedic.scan import catalog

log = logging.getLogger(__name__)

RESYNC = 30.0
"""Every request is looked at this often without any event: a missed watch event costs at
most this long, and it is cheap (no API call unless a step is due)."""


class RequestWatcher(NodeWatcher[Request]):
    """The ERRs, kept as :class:`~fleetmedic.policy.nvsentinel.Request`."""

    what = "externalremediationrequest"

    def __init__(self, requests: Requests, watch_timeout: int = 300) -> None:
        super().__init__(requests, watch_timeout=watch_timeout, transform=nvsentinel.read)  # type: ignore[arg-type]
        self.source = requests  # (not `requests`: NodeWatcher counts its calls in that)

    def _list_pages(self) -> Iterator[tuple[list[dict], str]]:
        return self.source.list_pages()

    def _watch(self, rv: str) -> Iterator[tuple[str, dict]]:
        return self.source.watch(rv, self.watch_timeout)


class Responder(Part):
    """The hand-off as a part of the loop: ``start`` and ``shutdown`` its threads, and
    ``observe`` wakes its worker; the nodes it claims are the ladder's to repair, and those
    NVSentinel still works on are held in the plan (controller/planner.py)."""

    name = "nvsentinel"

    def __init__(self, ctx: Context) -> None:
        n = ctx.cfg.nvsentinel
        requests = requests_of(ctx.cluster, n.api_group, n.version)
        if requests is None:
            raise ConfigError("nvsentinel: the hand-off needs a Kubernetes cluster")
        self.cfg, self.views, self.write, self.acting = ctx.cfg, ctx.views, ctx.write, ctx.acting
        self.clock, self.dry_run, self.metrics = ctx.clock, ctx.dry_run, ctx.metrics
        self.requests = requests
        self.watcher = RequestWatcher(self.requests, ctx.watch_timeout)
        self.catalog = catalog.load()
        self._poked = threading.Event()
        self.watcher._changed = self._poked  # an ERR event wakes the worker as a poke does
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._said: dict[str, str] = {}  # last reason logged per request
        self._owed = False  # a claimed node moved, or a pass took a step: look again
        self._wake_loop = ctx.wake
        self.passes = 0

    @classmethod
    def if_configured(cls, ctx: Context) -> Responder | None:
        """The responder with ``nvsentinel.enabled``, else None."""
        return cls(ctx) if ctx.cfg.nvsentinel.enabled else None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self, stop: threading.Event) -> None:
        """Check that the API server serves the ERR (ConfigError, one line, if not), then
        start the informer and the worker."""
        self.requests.check_served()
        self._stop = stop
        self.watcher.start(stop)
        self._thread = logcontext.thread(self._run, name="fleetmedic-nvsentinel")
        self._thread.start()

    def shutdown(self, grace: float = 5.0) -> None:
        self._poked.set()
        if self._thread is not None:
            self._thread.join(grace)

    # -- what wakes it ----------------------------------------------------------------------
    def written(self, upd: Update, view: NodeView) -> None:
        """The Recorder wrote ``upd``: a node that answers a request moved (a rung began or
        ended): look now. Never raises (it runs on the writer's thread)."""
        if keys.ANN_HANDOFF in view.annotations or keys.ANN_HANDOFF in upd.annotations:
            self._owed = True
            self._poked.set()

    def poke(self) -> None:
        self._poked.set()

    def observe(self, look: Look) -> None:
        """A cycle of the loop (a node changed, a worker ended): look at the requests."""
        self._poked.set()

    def active(self) -> bool:
        """A pass is owed while this controller acts: a claimed node moved (a rung ended,
        so its request may be due to complete) or the last pass took a step. ``run
        --once`` waits for it; a pass that takes no step ends it and wakes the loop."""
        return self._owed and self.acting()

    # -- the worker -----------------------------------------------------------------------
    def _run(self) -> None:
        while not self.watcher.synced.wait(1.0):
            if self._stop.is_set():
                return
        while not self._stop.is_set():
            self._poked.clear()
            self.one_pass()
            if self._poked.wait(RESYNC):
                self._stop.wait(0.005)  # (a burst of events: one pass for all of them)

    def one_pass(self) -> None:
        """:meth:`step_all`, and what it owes: a step taken may make the next one due."""
        self._owed = False
        try:
            took = self.step_all()
        except Exception:  # one odd request must never stop the responder
            log.exception("nvsentinel: a pass failed; trying again")
            return
        if took:
            self._owed = True
            self._poked.set()
        else:
            self._wake_loop()  # (a `run --once` waiting for this pass may end now)

    def step_all(self) -> int:
        """One pass over every request and every node that answers one; the steps taken."""
        self.passes += 1
        took = 0
        reqs = self.watcher.snapshot()
        views = self.views()
        for req in reqs.values():
            took += self._step(req.name, req, views.get(req.node))
        claimed = 0
        for view in views.values():
            claim = handoff.Claim.of(view) if keys.ANN_HANDOFF in view.annotations else None
            claimed += claim is not None
            if claim is not None and claim.err not in reqs:
                took += self._step(claim.err, None, view)
        self.metrics.handoff_claimed.set(claimed)
        return took

    def _step(self, name: str, req: Request | None, view: NodeView | None) -> bool:
        """Bring one request a step further; whether a step was taken."""
        step = handoff.decide(req, view, self.clock(), self.cfg, self.catalog)
        if step.idle:
            if self._said.get(name) != step.reason:
                self._said[name] = step.reason
                log.debug("nvsentinel: %s", step.reason)
            return False
        if not self.acting():
            if self.dry_run and self._said.get(name) != step.reason:
                self._said[name] = step.reason
                log.info("nvsentinel: dry run, would: %s", step.reason)
            return False
        log.info("nvsentinel: %s", step.reason)
        self._said[name] = step.reason
        return self.apply(step, req)

    def apply(self, step: handoff.Step, req: Request | None) -> bool:
        done = carry_out(step, req, self.requests, self.write, self.cfg.nvsentinel.events)
        c = step.condition
        if done and c is not None and c["status"] != "Unknown":
            self.metrics.handoff_answers.labels(status=c["status"], reason=c["reason"]).inc()
        return done


def carry_out(
    step: handoff.Step,
    req: Request | None,
    requests: Requests,
    write: Callable[[Update], object],
    events: bool = True,
) -> bool:
    """Carry out ``step``: the node write, the ERR's condition (and its Event), the node
    write after. False when the world moved meanwhile or a call failed (logged): the next
    pass decides again from what is there."""
    try:
        if step.update is not None:
            write(step.update)
        if step.condition is not None and req is not None:
            written = requests.set_condition(req.name, step.condition)
            if step.event is not None and events:
                ev = step.event
                requests.post_event(written, ev.reason, ev.message, ev.type)
        if step.after is not None:
            write(step.after)
    except Stale as exc:
        log.info("nvsentinel: %s; deciding again", exc)
        return False
    except NotFoundError as exc:
        log.info("nvsentinel: %s; gone meanwhile", exc)
        return False
    except FleetmedicError as exc:
        log.warning("nvsentinel: %s (%s); trying again on the next pass", exc, step.reason)
        return False
    return True


def answer_now(cfg: Config, cluster: Cluster, view: NodeView, when: datetime) -> str | None:
    """For a command a human ran (``fleetmedic release``): bring the request ``view``
    answers one step further at once, without waiting for the controller (which may have
    been quicker). Returns how the request stands then, or None when the node answers no
    request. Raises FleetmedicError when the request could not be read or written (the
    controller does it on its next pass then)."""
    claim = handoff.Claim.of(view)
    n = cfg.nvsentinel
    requests = requests_of(cluster, n.api_group, n.version) if n.enabled else None
    if claim is None or requests is None:
        return None
    try:
        req: Request | None = nvsentinel.read(requests.get(claim.err))
    except NotFoundError:
        req = None
    step = handoff.decide(req, view, when, cfg, catalog.load())
    if step.idle or req is None:
        return step.reason
    vocab, foreign = cfg.vocabulary(), cfg.foreign()

    def write(upd: Update) -> NodeView:
        return view_of(cluster.update_node(upd.node, upd.apply_for(vocab)), vocab, foreign)

    if step.update is not None:
        write(step.update)
    if step.condition is not None and req is not None:
        written = requests.set_condition(req.name, step.condition)
        if step.event is not None and n.events:
            requests.post_event(written, step.event.reason, step.event.message, step.event.type)
    if step.after is not None:
        write(step.after)
    done = nvsentinel.read(requests.get(req.name)).complete
    said = f"{done.type}={done.status} ({done.reason})" if done else "no condition yet"
    return f"{req.name}: {said}"
