"""One admitted action on one node, on a worker thread:

    node Lease -> ladder.begin -> write -> execute -> ladder.complete -> write

The in-flight marker is written *before* the phase starts and updated *after* it ends
(see policy/inflight.py), so a kill anywhere leaves a Node that says what was under way.
Errors never escape: a Stale or a cancellation re-decides the node next cycle, a
TemporaryError leaves it alone for its ``delay``, anything else for ERROR_BACKOFF.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime

from fleetmedic.adapters import runner
from fleetmedic.controller import audit
from fleetmedic.controller.execute import Cancelled, Executor
from fleetmedic.controller.leadership import Leadership
from fleetmedic.controller.metrics import Metrics
from fleetmedic.controller.recorder import Recorder
from fleetmedic.errors import FleetmedicError, NotFoundError, TemporaryError
from fleetmedic.model.config import Config
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy import ladder, phases
from fleetmedic.policy.actions import Action, Kind, Stale

log = logging.getLogger(__name__)

RECORD_RETRY = 120.0  # keep trying to record an outcome this long before giving up
ERROR_BACKOFF = 60.0  # after an unexpected error, leave the node alone this long
LEASED_KINDS = (Kind.RUN, Kind.PROBE, Kind.DRAIN, Kind.REPLACE)  # they touch the node itself


class NodeWork:
    def __init__(
        self,
        cfg: Config,
        leadership: Leadership,
        recorder: Recorder,
        executor: Executor,
        metrics: Metrics,
        clock: Callable[[], datetime],
    ) -> None:
        self.cfg, self.leadership, self.recorder = cfg, leadership, recorder
        self.executor, self.metrics, self.clock = executor, metrics, clock

    def __call__(self, view: NodeView, action: Action, cancel: threading.Event) -> float | None:
        """Do ``action``; returns how long to leave the node alone afterwards (or None)."""
        name = action.node
        if cancel.is_set():
            return None
        held = action.kind in LEASED_KINDS
        if held and not self.leadership.hold(name):
            return self.leadership.hold_retry
        try:
            self._do(view, action, cancel)
        except Stale as exc:
            log.info("%s: %s; deciding again", name, exc)
        except Cancelled as exc:
            log.info("%s", exc)
        except TemporaryError as exc:
            log.warning(
                "%s: %s (%s); trying again in %.0fs", name, exc, action.describe(), exc.delay
            )
            return max(exc.delay, 1.0)
        except FleetmedicError as exc:
            log.error("%s: %s (%s)", name, exc, action.describe())
            return ERROR_BACKOFF
        except Exception:
            log.exception("%s: unexpected error in %s", name, action.describe())
            return ERROR_BACKOFF
        finally:
            if held:
                self.leadership.let_go(name)
        return None

    def _do(self, view: NodeView, action: Action, cancel: threading.Event) -> None:
        who = f"fleetmedic controller {self.leadership.identity}"
        if action.kind == Kind.WRITE:
            assert action.update is not None
            self.recorder.write(action.update)
            if action.update.state is not None or action.update.remove_taints:
                # a taint changed (the Events of the write say so on the Node already)
                audit.record(
                    who,
                    action.node,
                    f"taint {action.update.state or 'others cleared'}",
                    action.reason,
                    "written",
                    step=action.step,
                    profile=action.profile,
                )
            return
        run_id = (
            runner.new_run_id(f"{action.node}-{action.phase or action.kind}")
            if action.kind in (Kind.RUN, Kind.PROBE)
            else None
        )
        cfg = self.cfg.profile(action.profile)
        upd = ladder.begin(view, action, self.clock(), cfg, run_id)
        if upd is not None:
            view = self.recorder.write(upd)
        if cancel.is_set():
            raise Cancelled(f"{action.node}: cancelled before {action.kind}")
        outcome = self.executor.execute(action, view, run_id, cancel)
        # the probe reads a boot id: logged, but no Event each time
        events = self.executor.cluster if action.kind != Kind.PROBE else None
        audit.of_action(who, action, outcome, run_id, events)
        if action.kind == Kind.ESCALATE and not ladder.notice(action):
            self.metrics.escalations.labels(outcome=outcome.status).inc()
        if action.kind == Kind.REPLACE or (ladder.notice(action) and outcome.status == "held"):
            via = cfg.cloud.replace_via
            self.metrics.replacements.labels(action.profile, via, outcome.status).inc()
        upd = ladder.complete(view, action, outcome, self.clock(), cfg)
        if upd is None:
            return
        try:
            self.recorder.write(upd, retry_for=RECORD_RETRY)
        except NotFoundError:
            if action.kind != Kind.REPLACE or not outcome.ok:
                raise
            # the hand-off deleted the Node: the audit line above and the email are its record
            log.info("%s: replaced; the Node is gone with its record", action.node)
            return
        counted = phases.metrics().get(action.phase or "")
        if counted is not None and counted.metric is not None and action.kind == Kind.RUN:
            value = counted.metric.value(outcome, upd)  # (the phase's metric, its label's value)
            if value is not None:
                self.metrics.phases[counted.name].labels(value).inc()
