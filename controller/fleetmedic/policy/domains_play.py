"""A domain incident's playbook (``domains[].action: {playbook: ...}``), as pure steps over
its record (:class:`Play`, kept in the incident on the pause ConfigMap: policy/domains.py).

    pending --(run recorded, then the playbook runs once over the fenced nodes)--> running
    running --(its outcome recorded)--> verify
    verify  --(the ladder's verify, one run over the same nodes; those that pass return to
               service)--> done: the incident closes, the rest go to their own ladders

- **Once per incident.** The run is recorded (``running``, its run id) *before* it starts
  and its outcome *after*, each in the incident's record. The playbook gets
  :func:`request_id` (from the incident's id) as ``fleetmedic_request_id``, so its roles
  act once per incident. A controller killed mid-run finds ``running`` on the record at
  its next start and runs it again with the same request id: the roles see the request
  done and do not act again (or finish what the killed run began), exactly as the ladder
  resumes an interrupted phase (policy/ladder.py ``begin``/``complete``: same request id,
  and the phase's timeout counts from its first start).
- **Its nodes.** The domain's fenced nodes when it starts (kept in :attr:`Play.nodes`, so
  a resumed run and the verify act on the same ones). A node whose own rung was under way
  when the incident opened finishes it first: the playbook waits for it (:func:`next_step`).
- **After it.** Every one of its nodes is verified; a pass returns the node to service
  through the ladder's own return (policy/steps.py ``returned``: our taint and cordon off,
  other tools' signals after their lifecycle, a ``pass`` in the node's history naming the
  incident); a node that still fails stays fenced and, the incident closed, enters its own
  ladder. A verify that cannot be run (no answer) counts as failing.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from fleetmedic.model import keys
from fleetmedic.model.config import Config, DomainConfig
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy.actions import HEALTHY, LOST, Update
from fleetmedic.policy.history import decode, last_episode, parse_time, stamp
from fleetmedic.policy.inflight import RUNNING as FL_RUNNING
from fleetmedic.policy.inflight import InFlight
from fleetmedic.policy.steps import NodeCtx, returned

PENDING, RUNNING, VERIFY, DONE = "pending", "running", "verify", "done"
STEP = "domain"
"""The ``step`` of the history entry a node returned by its domain's playbook gets."""
OK = "ok"


@dataclasses.dataclass(frozen=True)
class Play:
    """The domain playbook's record in its incident."""

    playbook: str
    status: str = PENDING  # pending | running | verify | done
    nodes: tuple[str, ...] = ()  # the fenced nodes it runs over (set when it starts)
    run_id: str | None = None  # the current run (the playbook's, then the verify's)
    started_at: str | None = None  # when the playbook first started (kept on a resume)
    runs: int = 0  # playbook runs started: 1, more only when a restart resumed it
    outcome: str = ""  # what the playbook's run said, in one line
    results: Mapping[str, str] = dataclasses.field(default_factory=dict)  # node -> status
    passed: tuple[str, ...] = ()  # verified: back in service
    failed: tuple[str, ...] = ()  # still failing: to their own ladders
    ended_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["results"] = dict(self.results)
        return {k: v for k, v in data.items() if v not in (None, "", {}, (), 0)}

    @classmethod
    def from_json(cls, data: Any) -> Play | None:
        if not isinstance(data, Mapping) or not data.get("playbook"):
            return None
        status = str(data.get("status") or PENDING)
        if status not in (PENDING, RUNNING, VERIFY, DONE):
            return None
        return cls(
            playbook=str(data["playbook"]),
            status=status,
            nodes=tuple(str(n) for n in data.get("nodes") or ()),
            run_id=data.get("run_id"),
            started_at=data.get("started_at"),
            runs=int(data.get("runs") or 0),
            outcome=str(data.get("outcome") or ""),
            results={str(k): str(v) for k, v in dict(data.get("results") or {}).items()},
            passed=tuple(str(n) for n in data.get("passed") or ()),
            failed=tuple(str(n) for n in data.get("failed") or ()),
            ended_at=data.get("ended_at"),
        )


def planned(cfg: DomainConfig | None) -> Play | None:
    """The record a newly opened incident starts with (None: its action is ``hold``)."""
    book = cfg.playbook if cfg is not None else None
    return Play(playbook=book.playbook) if book is not None else None


def request_id(incident_id: str) -> str:
    """``fleetmedic_request_id`` of an incident's playbook: stable for the incident, unique
    over the fleet's life (the incident's id has its domain and opening time)."""
    return "domain-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", incident_id)


@dataclasses.dataclass(frozen=True)
class Next:
    """What an incident's playbook needs now: ``wait`` (``why``), ``run`` the playbook or
    ``verify`` over ``nodes``, or ``finish`` (return the passed nodes, close)."""

    what: str
    nodes: tuple[str, ...] = ()
    why: str = ""
    resumed: bool = False


def next_step(play: Play, fenced: Sequence[str], busy: Sequence[str] = ()) -> Next:
    """``fenced``: the domain's fenced nodes now; ``busy``: nodes with work under way (a
    rung that was running when the incident opened): the playbook waits for them."""
    if play.status == DONE:
        return Next("finish", play.nodes)
    nodes = play.nodes or tuple(sorted(fenced))
    if not nodes:
        return Next("wait", why="no node of the domain is fenced")
    working = sorted(set(busy) & set(nodes))
    if working:
        return Next("wait", nodes, f"a rung under way on {', '.join(working)} finishes first")
    if play.status == VERIFY:
        return Next("verify", nodes, resumed=play.run_id is not None)
    return Next("run", nodes, resumed=play.status == RUNNING)


def began(play: Play, nodes: Sequence[str], run_id: str, now: datetime) -> Play:
    """Recorded before the playbook starts (a resumed run keeps its first start)."""
    first = play.started_at if play.status == RUNNING and play.started_at else stamp(now)
    return dataclasses.replace(
        play,
        status=RUNNING,
        nodes=tuple(nodes),
        run_id=run_id,
        started_at=first,
        runs=play.runs + 1,
    )


def ran(
    play: Play, results: Mapping[str, str], message: str, now: datetime, timeout: float
) -> Play:
    """The playbook's outcome (per node: ok | failed | unreachable | timeout | lost).
    Whatever it says, every node is verified next: the verify is the judge. A run whose
    execution node was lost is resumed (same request id) until the playbook's timeout
    from its first start, as the ladder resumes such a phase."""
    if results and all(s == LOST for s in results.values()):
        started = parse_time(play.started_at) or now
        if now - started < timedelta(seconds=timeout):
            return dataclasses.replace(play, outcome=f"run lost ({message}); resuming")
    ok = sorted(n for n, s in results.items() if s == OK)
    said = f"{len(ok)} of {len(play.nodes)} node(s) ok" + (f": {message}" if message else "")
    return dataclasses.replace(
        play, status=VERIFY, run_id=None, outcome=said[:300], results=dict(results)
    )


def verifying(play: Play, run_id: str) -> Play:
    return dataclasses.replace(play, run_id=run_id)


def verified(play: Play, results: Mapping[str, str], now: datetime) -> Play:
    """Each node's verify: ok returns it; anything else (failed, unreachable, no result)
    is a node that still fails."""
    passed = tuple(n for n in play.nodes if results.get(n) == OK)
    failed = tuple(n for n in play.nodes if results.get(n) != OK)
    return dataclasses.replace(
        play, status=DONE, run_id=None, passed=passed, failed=failed, ended_at=stamp(now)
    )


def summary(play: Play) -> str:
    """One line for the close: what the playbook did and which nodes returned."""
    back = ", ".join(play.passed) or "none"
    line = f"playbook {play.playbook} ran over {len(play.nodes)} node(s) ({play.outcome})"
    line += f"; verified, returned to service: {back}"
    if play.failed:
        line += f"; still failing, to their own ladders: {', '.join(play.failed)}"
    return line


def returning(view: NodeView, incident: str, play: Play, now: datetime, cfg: Config) -> Update:
    """The write that returns a node that passed the verify after its domain's playbook:
    the ladder's own return to service (steps.returned), its history entry a ``pass`` of
    step ``domain`` naming the incident and the playbook. ``expect_state`` guards it: a
    node fenced again meanwhile is not returned (the write is stale)."""
    n = NodeCtx(view, now, cfg)
    try:
        fl = InFlight.decode(n.raw)
    except ValueError:
        fl = None
    ep = (
        fl.ep
        if fl is not None
        else last_episode(decode(view.annotations.get(keys.ANN_HISTORY))) + 1
    )
    said = f"domain incident {incident}: playbook {play.playbook}, then verify passed"
    ours = InFlight(
        ep=ep,
        step=STEP,
        attempt=1,
        phase="verify",
        status=FL_RUNNING,
        step_start=play.started_at or stamp(now),
        since=stamp(now),
        run_id=play.run_id,
        notes=(said,),
    )
    return returned(n, ours, said)


def still_fenced(view: NodeView) -> bool:
    return view.state != HEALTHY
