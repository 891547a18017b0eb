"""The hand-off with NVSentinel, one ExternalRemediationRequest (ERR) and its node at a
time: pure, from the request, the node's view and the clock.

    step = decide(request, view, now, cfg, catalog)   # what next for this request?

One owner at a time. fleetmedic acts on a node only while NVSentinel has released it to
this very request: ``NVSentinelOwnershipReleased=True`` on the ERR *and* on the node the
release taint with the request's name *and* ``managed=false``. It never removes either
mark (completing the ERR makes NVSentinel do it), and while NVSentinel still works on a
node (its state label, :func:`holds`) the ladder starts nothing there.

The node carries the hand-off (``fleetmedic.io/nvsentinel``, a :class:`Claim`), written in
the same Node write as the repair taint, so everything survives a restart:

- released, not claimed yet: **claim** it: our taint at the rung the HealthEvent asks for
  (policy/nvsentinel.py; fences only go up: a stronger taint already there stays), with
  the finding and the GPUs a reset is for. The ladder does the rest, with its budgets,
  breaker, domains, gates and emails.
- claimed, in repair: **report** the rung under way as the message of
  ``ExternalRemediationComplete=Unknown`` (an Event on the ERR when the rung changes).
- the ladder ended: **complete** it, True when the node passed verify and the gates (or a
  human released it: ``fleetmedic release``), False with the reason when it ended with a
  human (manual) or someone stopped it; then the claim goes (True), or stays until the
  human's release turns a False into True.
- the ERR was deleted (or is being) while we repair: **hold** the node as it is, fenced,
  for a human (``fleetmedic.io/hold``: the ladder stops at its next safe point).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from datetime import datetime

from fleetmedic.model import keys
from fleetmedic.model.config import Config
from fleetmedic.model.nodestate import NodeView
from fleetmedic.model.vocabulary import REPAIR_STATES
from fleetmedic.policy import nvsentinel
from fleetmedic.policy.actions import HEALTHY, Event, Update
from fleetmedic.policy.history import PASS, RELEASED, Attempt, decode, last_episode, stamp
from fleetmedic.policy.inflight import Escalated, InFlight
from fleetmedic.policy.nvsentinel import COMPLETE, Request
from fleetmedic.scan.catalog import Catalog

TOOL = "nvsentinel"  # entered-by, and the foreign signals' tool name
IN_PROGRESS = "RemediationInProgress"
PREFIX = "fleetmedic: "  # our condition messages start so (and tell ours from NVSentinel's)


@dataclasses.dataclass(frozen=True)
class Claim:
    """``fleetmedic.io/nvsentinel`` on a node: the request answered and how."""

    err: str  # the ERR's name (= the release taint's value)
    uid: str
    ep: int  # the episode that answers it (its attempts decide the outcome)
    rung: str  # where it started
    at: str  # when it was claimed
    then: str | None = None  # a rung still to come after a pass (CONTACT_SUPPORT: manual)
    stopped: str | None = None  # `fleetmedic reset` by whom: it stops us, it does not vouch

    def encode(self) -> str:
        data = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def of(cls, view: NodeView) -> Claim | None:
        """The claim on ``view``; None when absent or unreadable (an unreadable one is
        answered as no claim: the request is claimed again, which never lowers a fence)."""
        raw = view.annotation_json(keys.ANN_HANDOFF)
        if not isinstance(raw, Mapping):
            return None
        try:
            return cls(
                err=str(raw["err"]),
                uid=str(raw.get("uid", "")),
                ep=int(raw["ep"]),
                rung=str(raw["rung"]),
                at=str(raw.get("at", "")),
                then=raw.get("then") or None,
                stopped=raw.get("stopped") or None,
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclasses.dataclass(frozen=True)
class Step:
    """What to do for one request: write the node (``update``), write the ERR's
    ExternalRemediationComplete (``condition``, with ``event`` on the ERR), then write the
    node again (``after``, once the ERR write landed). Nothing of it: ``reason`` says why."""

    reason: str
    update: Update | None = None
    condition: Mapping[str, str] | None = None
    event: Event | None = None
    after: Update | None = None

    @property
    def idle(self) -> bool:
        return self.update is None and self.condition is None and self.after is None


def released_to(view: NodeView, name: str, cfg: Config) -> bool:
    """NVSentinel's marks of a release to request ``name`` are on the node."""
    n = cfg.nvsentinel
    tainted = any(t.get("key") == n.release_taint and t.get("value") == name for t in view.taints)
    return tainted and view.labels.get(n.managed_label) == "false"


def decide(
    req: Request | None,
    view: NodeView | None,
    now: datetime,
    cfg: Config,
    catalog: Catalog,
) -> Step:
    """The next step for request ``req`` (None: gone) and its node's ``view`` (None: not
    in the pool). Either may be None, not both."""
    claim = Claim.of(view) if view is not None else None
    if req is None or req.deleting:
        return _withdrawn(view, claim, now, req)
    if view is None:
        return Step(f"{req.name}: node {req.node or '(none named)'} is not in fleetmedic's pool")
    done = req.complete
    if not req.released:
        return Step(f"{req.name}: NVSentinel has not released {view.name}")
    if req.completion_time or (done is not None and done.status == "True"):
        if claim is not None and claim.err == req.name:
            if view.in_repair and not view.annotations.get(keys.ANN_REPLACED):
                return _withdrawn(view, claim, now, req)  # closed by someone else mid-repair
            return Step(f"{req.name}: closed", update=_drop(view, now))
        return Step(f"{req.name}: closed")
    if not released_to(view, req.name, cfg):
        if claim is not None and claim.err == req.name and view.in_repair:
            return _withdrawn(view, claim, now, req)
        return Step(f"{req.name}: {view.name} lacks NVSentinel's release marks: NVSentinel owns it")
    if keys.ANN_HOLD in view.annotations:
        return Step(f"{req.name}: {view.name} is held for a human (fleetmedic.io/hold)")
    if claim is None or claim.err != req.name:
        if done is not None and done.status == "False" and done.message.startswith(PREFIX):
            return Step(f"{req.name}: answered False already ({done.reason}); not taken again")
        return _claim(req, view, now, cfg, catalog)
    return _progress(req, view, claim, now)


def _claim(req: Request, view: NodeView, now: datetime, cfg: Config, catalog: Catalog) -> Step:
    ans = nvsentinel.answer(req.event, catalog, cfg.nvsentinel.custom_actions)
    state = view.state
    stronger = view.in_repair and REPAIR_STATES.index(state) >= REPAIR_STATES.index(ans.rung)
    fl = InFlight.read(view.annotations)
    ep = fl.ep if fl else last_episode(decode(view.annotations.get(keys.ANN_HISTORY))) + 1
    claim = Claim(req.name, req.uid, ep, ans.rung, stamp(now), ans.then)
    ann: dict[str, str | None] = {
        keys.ANN_HANDOFF: claim.encode(),
        keys.ANN_RESET_GPUS: json.dumps(list(ans.gpus)) if ans.gpus else None,
    }
    if not stronger:
        ann[keys.ANN_ENTERED_BY] = TOOL
        ann[keys.ANN_LAST_FINDING] = json.dumps(ans.finding, separators=(",", ":"))
    kept = f" ({state} already under way: fences only go up)" if stronger else ""
    why = f"NVSentinel handed the node over ({req.name}): {ans.rung}{kept}; {ans.why}"
    return Step(
        f"{req.name}: claim {view.name} at {ans.rung}",
        update=Update(
            node=view.name,
            at=stamp(now),
            expect_state=state,
            state=None if stronger else ans.rung,
            annotations=ann,
            events=(Event("RepairEntered" if not stronger else "HandoffJoined", why, "Warning"),),
        ),
    )


def _progress(req: Request, view: NodeView, claim: Claim, now: datetime) -> Step:
    history = decode(view.annotations.get(keys.ANN_HISTORY))
    ours = [a for a in history if a.ep >= claim.ep]
    if view.annotations.get(keys.ANN_REPLACED):
        return _complete(req, view, claim, now, "True", "Replaced", _replaced(view), drop=False)
    if view.state == HEALTHY and claim.stopped:
        message = f"fleetmedic reset by {claim.stopped}: stopped, the node was not verified"
        return _complete(req, view, claim, now, "False", "RepairStopped", message, drop=True)
    if view.state == HEALTHY:
        then = _then(view, claim, ours, now)
        if then is not None:
            return then
        status, reason, message = _outcome(ours, view.name)
        return _complete(req, view, claim, now, status, reason, message, drop=True)
    esc = Escalated.decode(view.annotations.get(keys.ANN_ESCALATED))
    if view.state == "manual" and esc is not None:
        tried = _tried(ours)
        message = (
            f"the ladder ended with a human ({tried}); `fleetmedic release {view.name}` "
            "returns the node and completes this request"
        )
        return _complete(req, view, claim, now, "False", "EscalatedToHuman", message, drop=False)
    message = _under_way(view, ours)
    current = req.complete
    said = current.message.removeprefix(PREFIX) if current is not None else ""
    if current is not None and (current.status, said) == ("Unknown", message):
        return Step(f"{req.name}: {message}")
    rung = message.split(",")[0] if "attempt" in message else None
    return Step(
        f"{req.name}: report {message}",
        condition=_condition(req, "Unknown", IN_PROGRESS, message, now),
        event=Event("RemediationStep", message) if rung and not said.startswith(rung) else None,
    )


def _then(view: NodeView, claim: Claim, ours: list[Attempt], now: datetime) -> Step | None:
    """CONTACT_SUPPORT's second rung: after the diagnostics passed, a human."""
    if claim.then is None or not ours or ours[-1].result != PASS:
        return None
    nxt = dataclasses.replace(claim, ep=last_episode(ours) + 1, rung=claim.then, then=None)
    why = f"NVSentinel asked for support ({claim.err}): diagnostics done, now {claim.then}"
    return Step(
        f"{claim.err}: {view.name} on to {claim.then}",
        update=Update(
            node=view.name,
            at=stamp(now),
            expect_state=HEALTHY,
            state=claim.then,
            annotations={keys.ANN_HANDOFF: nxt.encode(), keys.ANN_ENTERED_BY: TOOL},
            events=(Event("RepairEntered", why, "Warning"),),
        ),
    )


def _outcome(ours: list[Attempt], node: str) -> tuple[str, str, str]:
    last = ours[-1] if ours else None
    if last is not None and last.result == PASS:
        return "True", "Repaired", f"{node} passed verify and its gates after {_tried(ours)}"
    if last is not None and last.result == RELEASED:
        return (
            "True",
            "ReleasedByHuman",
            f"{last.message or 'released by a human'} ({_tried(ours)})",
        )
    said = f"{last.step} {last.result}" if last else "before any rung ran"
    return (
        "False",
        "RepairStopped",
        f"fleetmedic's repair taint was removed ({said}): the node was not verified",
    )


def _complete(
    req: Request,
    view: NodeView,
    claim: Claim,
    now: datetime,
    status: str,
    reason: str,
    message: str,
    *,
    drop: bool,
) -> Step:
    current = req.complete
    after = _drop(view, now) if drop else None
    if current is not None and (current.status, current.reason) == (status, reason):
        return Step(f"{req.name}: {status} ({reason}) already", after=after)
    return Step(
        f"{req.name}: complete {status} ({reason})",
        condition=_condition(req, status, reason, message, now),
        event=Event(f"Remediation{'Succeeded' if status == 'True' else 'Failed'}", message),
        after=after,
    )


def _withdrawn(
    view: NodeView | None, claim: Claim | None, now: datetime, req: Request | None
) -> Step:
    """The request is gone (or going) or the release marks went: stop where we are."""
    name = req.name if req is not None else claim.err if claim else "request"
    if view is None or claim is None:
        return Step(f"{name}: gone, and no node of ours answers it")
    if not view.in_repair:
        return Step(f"{name}: gone; the hand-off is over", update=_drop(view, now))
    if keys.ANN_HOLD in view.annotations:
        return Step(f"{name}: gone; {view.name} held for a human already")
    why = (
        f"NVSentinel withdrew {claim.err} while {view.state} was under way: the ladder stops "
        f"here, fenced; `fleetmedic release {view.name}` returns the node"
    )
    hold = json.dumps({"by": TOOL, "err": claim.err, "at": stamp(now), "why": why})
    return Step(
        f"{name}: withdrawn mid-repair; hold {view.name}",
        update=Update(
            node=view.name,
            at=stamp(now),
            annotations={keys.ANN_HOLD: hold, keys.ANN_HANDOFF: None},
            events=(Event("HandoffWithdrawn", why, "Warning"),),
        ),
    )


def _drop(view: NodeView, now: datetime) -> Update:
    return Update(
        node=view.name,
        at=stamp(now),
        annotations={keys.ANN_HANDOFF: None, keys.ANN_RESET_GPUS: None},
    )


def _condition(req: Request, status: str, reason: str, message: str, now: datetime) -> dict:
    current = req.complete
    since = current.since if current is not None and current.status == status else stamp(now)
    return {
        "type": COMPLETE,
        "status": status,
        "reason": reason,
        "message": f"{PREFIX}{message}"[:1024],
        "lastTransitionTime": since,
        "observedGeneration": req.generation,
    }


def _under_way(view: NodeView, ours: list[Attempt]) -> str:
    fl = InFlight.read(view.annotations)
    if fl is None:
        return f"{view.state} about to start"
    before = ours[-1] if ours else None
    after = f" after {before.step} {before.result}" if before else ""
    return f"{fl.step} attempt {fl.attempt} of episode {fl.ep}, {fl.phase}{after}"


def _tried(ours: list[Attempt]) -> str:
    steps = [f"{a.step} {a.result}" for a in ours]
    return ", ".join(steps[-5:]) or "no rung"


def _replaced(view: NodeView) -> str:
    return f"{view.name} was handed to its cloud for a new instance"


def holds(views: Iterable[NodeView], cfg: Config) -> dict[str, str]:
    """Nodes NVSentinel is working on (its state label) and has not released: the ladder
    starts nothing there (a repair of ours already under way goes on: it was first). With
    the hand-off off but NVSentinel's signals taken (the ``nvsentinel`` foreign preset),
    ``drain-succeeded`` is where NVSentinel's part ends, so it is not held."""
    n = cfg.nvsentinel
    if not n.enabled and not any(f.tool == TOOL for f in cfg.foreign()):
        return {}
    states = set(n.working_states) - (set() if n.enabled else {"drain-succeeded"})
    out: dict[str, str] = {}
    for v in views:
        if keys.ANN_IN_FLIGHT in v.annotations or keys.ANN_HANDOFF in v.annotations:
            continue  # ours: a repair under way, or a request claimed
        released = v.labels.get(n.managed_label) == "false" and any(
            t.get("key") == n.release_taint for t in v.taints
        )
        state = v.labels.get(n.state_label)
        if released:
            # the request's rung wins over any other signal; off, another remediator has it
            out[v.name] = (
                "NVSentinel released it to a request: the responder claims it"
                if n.enabled
                else "NVSentinel released it to an external remediator (the hand-off is off)"
            )
        elif state in states:
            out[v.name] = f"NVSentinel is working on it ({n.state_label}={state})"
    return out
