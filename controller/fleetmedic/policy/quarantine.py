"""The quarantine rung (issue 20 part 5): deep diagnostics before a node that keeps
failing the same way returns to service, and a recommendation. Pure.

A repair whose verify passed normally returns the node to service. It is held for
quarantine instead (:func:`due`) when

- the history shows this is the ``count``-th return to service for the same fault
  (:func:`fault_of`: the catalog rule of the node's last finding, e.g. ``xid.79``) within
  ``window`` (``ladder.quarantine``, when ``enabled``), or
- someone asked for it (``fleetmedic quarantine NODE``: the
  ``fleetmedic.io/quarantine-request`` annotation), whatever the config says.

The node, still fenced and drained, then runs ``playbooks/quarantine.yml``: ``fleetmedic
diag --level N --fabric --json`` (dcgmi diag or rvs at the configured level, and the RDMA
port checks). :func:`judge` reads its result:

- every test passed and the fabric is sound: ``return-to-service`` (the repair passes);
- a test failed or the fabric has a finding: ``replace`` (the ladder's terminal step:
  ``replace`` where the pool's ladder has it, else ``manual`` with the evidence);
- anything it could not tell (a run that failed or timed out, a tool missing or timed
  out, no result): ``unknown``; the node stays fenced and goes to ``manual``. Never
  healthy on missing data.

:func:`record` is the ``fleetmedic.io/quarantine`` annotation: the recommendation, the
level, the time, every test's result per GPU and the fabric findings, bounded in size.
The in-flight marker's phase says a quarantine is under way, so a controller restart
resumes it; the playbook started the run detached on the node under the attempt's request
id, so the resumed phase waits for that run instead of starting a second one.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from fleetmedic.model import keys
from fleetmedic.model.config import Config
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy import sweep
from fleetmedic.policy.actions import HEALTHY, Event, Update
from fleetmedic.policy.flap import human
from fleetmedic.policy.history import PASS, Attempt, parse_time

PHASE = "quarantine"
"""The in-flight phase of a quarantine: after a step's verify, not one of its phases."""
RETURN, REPLACE, UNKNOWN = "return-to-service", "replace", "unknown"
RECOMMENDATIONS = (RETURN, REPLACE, UNKNOWN)
MAX_BYTES = 32 * 1024
"""The annotation's limit: every annotation of a Node shares 256 KiB; 32 KiB holds a level-4
run of 8 GPUs (about 14 KB) with room, and per-test rows beyond it are left out with a note."""
MAX_MESSAGE = 200


def fault_of(view: NodeView) -> str | None:
    """What the node was repaired for: its last finding's catalog rule (``xid.79``), else
    its kind and code (``xid`` and 79 give the same ``xid.79``), else its kind (a failed
    sweep's ``diag``). None when nothing names it (a human's taint, a foreign signal)."""
    finding = view.annotation_json(keys.ANN_LAST_FINDING)
    if not isinstance(finding, Mapping):
        return None
    if finding.get("rule"):
        return str(finding["rule"])
    kind = finding.get("kind")
    if kind and finding.get("code") is not None:
        return f"{kind}.{finding['code']}"
    return str(kind) if kind else None


def repairs_for(attempts: Iterable[Attempt], fault: str, now: datetime, window: float) -> int:
    """Returns to service recorded for ``fault`` that ended within ``window`` seconds."""
    since = now - timedelta(seconds=window)
    return sum(
        1
        for a in attempts
        if a.result == PASS and a.fault == fault and (parse_time(a.end) or since) > since
    )


def due(
    attempts: Sequence[Attempt],
    fault: str | None,
    now: datetime,
    count: int,
    window: float,
) -> bool:
    """Is this return to service (not yet in ``attempts``) the ``count``-th for ``fault``
    within ``window``? An unnamed fault is never the same as another."""
    if count <= 1:
        return True
    return fault is not None and repairs_for(attempts, fault, now, window) + 1 >= count


def reason(fault: str | None, count: int, window: float) -> str:
    if count <= 1:
        return "every repair is quarantined (ladder.quarantine.count: 1)"
    return f"repaired {count} times for {fault} within {human(window)}"


def requested(view: NodeView) -> str | None:
    """Who asked for a quarantine (``fleetmedic quarantine NODE``), or None."""
    raw = view.annotations.get(keys.ANN_QUARANTINE_REQUEST)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return "someone"
    return str(data.get("by") or "someone") if isinstance(data, Mapping) else "someone"


def request_record(by: str, at: str) -> str:
    return json.dumps({"by": by, "at": at}, separators=(",", ":"), sort_keys=True)


def ask(view: NodeView, cfg: Config, by: str, at: str) -> tuple[Update, str]:
    """``fleetmedic quarantine NODE``: the write that asks for a quarantine, and what it
    means for the node, in one line; ValueError (its message says why) for a node that
    cannot take one. ``cfg``: the node's profile.

    - under repair at a rung that ends in a verify: its return to service waits for the
      quarantine (the request annotation);
    - in service: also fenced at its ladder's first rung (drained as that rung drains),
      so it is repaired the mildest way, then quarantined before it returns;
    - at ``manual`` or at a rung that hands the node to its cloud: refused (a human, or
      the cloud, has it already)."""
    if view.annotations.get(keys.ANN_REPLACED) is not None:
        raise ValueError("it was handed to its cloud for replacement")
    state = view.state
    order = cfg.ladder.order
    if state == "manual":
        raise ValueError("it is in manual: a human has it (release it first)")
    if state != HEALTHY and (state not in order or cfg.ladder.step(state).terminal):
        raise ValueError(f"it is in {state}, which does not return it to service")
    record = request_record(by, at)
    if state != HEALTHY:
        upd = Update(
            node=view.name,
            at=at,
            expect_state=state,
            annotations={keys.ANN_QUARANTINE_REQUEST: record},
            events=(Event("QuarantineRequested", f"by {by}: before it returns from {state}"),),
        )
        return upd, f"in {state}: quarantined before it returns to service"
    first = cfg.ladder.first_repair()  # not diagnose: a repair, then the quarantine
    if first == "manual" or cfg.ladder.step(first).terminal:
        raise ValueError(f"its ladder starts at {first}, which does not return it to service")
    upd = Update(
        node=view.name,
        at=at,
        expect_state=HEALTHY,
        state=first,
        annotations={keys.ANN_QUARANTINE_REQUEST: record},
        history_limit=cfg.ladder.history_limit,
        events=(Event("QuarantineRequested", f"by {by}: fenced at {first}, then quarantine"),),
    )
    return upd, f"in service: fenced at {first}, quarantined before it returns"


# -- judging a run ---------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Result:
    recommendation: str  # return-to-service | replace | unknown
    summary: str
    tests: tuple[Mapping[str, Any], ...] = ()  # every test's result per GPU
    fabric: tuple[Mapping[str, Any], ...] = ()  # the fabric checks' results

    @property
    def failed(self) -> tuple[Mapping[str, Any], ...]:
        return tuple(t for t in self.tests if t.get("result") == "fail")


def judge(status: str, stdout: str, message: str = "") -> Result:
    """The recommendation from a quarantine run: the host's outcome and ``fleetmedic diag
    --fabric --json``'s line (the last JSON line of the last task's stdout)."""
    doc = sweep.diag_json(stdout)
    if doc is None:
        why = message or "no diagnostic result"
        return Result(UNKNOWN, _clip(f"{status}: {why}" if status != "ok" else why))
    tests = tuple(_test_row(t) for t in _rows((doc.get("evidence") or {}).get("tests")))
    fabric = tuple(_fabric_row(r) for r in _rows(doc.get("fabric")))
    diag = str(doc.get("status"))
    statuses = [diag, *(str(r["status"]) for r in fabric)]
    said = [f"{doc.get('name', 'diag')}: {doc.get('summary', '')}"]
    said += [f"{r['check']}: {r['summary']}" for r in fabric if r["status"] != "ok"]
    summary = _clip("; ".join(said))
    if "problem" in statuses:
        return Result(REPLACE, summary, tests, fabric)
    if any(s != "ok" for s in statuses) or "fabric" not in doc:
        missing = "" if "fabric" in doc else "; no fabric checks in the result"
        return Result(UNKNOWN, _clip(summary + missing), tests, fabric)
    return Result(RETURN, summary, tests, fabric)


def _rows(value: Any) -> list[Mapping[str, Any]]:
    return [r for r in value if isinstance(r, Mapping)] if isinstance(value, list) else []


def _test_row(t: Mapping[str, Any]) -> dict[str, Any]:
    """One test on some GPUs, as dcgmi (category, name, gpus, status, warnings) or rvs
    (module, action, gpus, status) reported it."""
    gpus = t.get("gpus")
    warnings = t.get("warnings") or ()
    row: dict[str, Any] = {
        "test": str(t.get("name") or t.get("action") or t.get("module") or "?"),
        "gpus": [g for g in gpus if isinstance(g, int)] if isinstance(gpus, list) else [],
        "result": str(t.get("status") or "?"),
    }
    msg = "; ".join(str(w) for w in warnings) if isinstance(warnings, list) else ""
    if msg:
        row["message"] = _clip(msg, MAX_MESSAGE)
    return row


def _fabric_row(r: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "check": str(r.get("name", "?")),
        "status": str(r.get("status", "unknown")),
        "summary": _clip(str(r.get("summary", "")), MAX_MESSAGE),
    }


def _clip(text: str, limit: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- the annotation --------------------------------------------------------------------
def record(result: Result, level: int, at: str, run: str, why: str, limit: int = MAX_BYTES) -> str:
    """The ``fleetmedic.io/quarantine`` annotation, at most ``limit`` bytes: failed tests
    are kept first; rows that do not fit are counted in ``omitted`` (the run's artifacts
    keep them all)."""
    tests = sorted(result.tests, key=lambda t: t.get("result") != "fail")
    doc: dict[str, Any] = {
        "recommendation": result.recommendation,
        "level": level,
        "at": at,
        "run": run,
        "why": why,
        "summary": result.summary,
        "tests": tests,
        "fabric": list(result.fabric),
    }
    text = _dumps(doc)
    keep = len(tests)
    while len(text.encode()) > limit and (keep or doc["fabric"]):
        if keep:
            keep = max(0, keep - max(1, keep // 4))
            doc["tests"] = tests[:keep]
        else:
            doc["fabric"] = doc["fabric"][:-1]
        doc["omitted"] = (
            f"{len(tests) - keep} test rows and {len(result.fabric) - len(doc['fabric'])} "
            f"fabric rows left out to stay under {limit} bytes: see run {run}"
        )
        text = _dumps(doc)
    return text


def recommendation_of(raw: str | None) -> str | None:
    """The recommendation in an annotation value :func:`record` wrote (None: none)."""
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        return None
    said = data.get("recommendation") if isinstance(data, Mapping) else None
    return said if said in RECOMMENDATIONS else None


def read(view: NodeView) -> Mapping[str, Any] | None:
    """The node's last quarantine record, or None."""
    data = view.annotation_json(keys.ANN_QUARANTINE)
    return data if isinstance(data, Mapping) and "recommendation" in data else None


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
