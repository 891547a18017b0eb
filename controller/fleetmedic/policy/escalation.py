"""What an escalation says first: the node, the finding, the rungs tried. Pure.

A mail client shows about 78 characters of a subject, a chat client one line, ``kubectl
describe node`` one line per Event. So each leads with the cause, e.g.

    gpu-2 needs hands: GPU 1 lost (GPU_IS_LOST); reboot, reimage did not cure it

and the bookkeeping (which phase, which task, which run) goes into the body. Notes that
only say a phase had nothing to do (``restore: no GPU partitions before the repair; left
alone``) are left out of the attempts shown, unless the attempt failed in that phase.

The finding comes from, in this order: the RMA case of the episode (policy/lemon.py),
the GPUs the episode's diagnose phase implicated (the node's GPU record), the agent's
last finding, the agent's failing checks, the last failed attempt's own words, and
last the escalation's reason (flap damping, a blocked drain, a human's taint).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from fleetmedic.model import keys
from fleetmedic.model.escalationtext import SUBJECT_LIMIT, shown_message, subject
from fleetmedic.model.gpus import NodeRecord
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy.history import Attempt, decode, of_episode

CAUSE_LIMIT = 120
FAMILY_WORDS = {
    "bus-loss": "lost",
    "memory-uncorrectable": "uncorrectable memory errors",
    "memory-exhausted": "out of spare memory",
}
RUNG_WORDS = {"power_cycle": "power cycle"}


def cause(view: NodeView, ep: int, fallback: str = "") -> str:
    """The finding in a few words (see the module doc for where it comes from)."""
    rma = view.annotation_json(keys.ANN_RMA)
    if isinstance(rma, Mapping) and rma.get("ep") == ep and rma.get("summary"):
        return _short(str(rma["summary"]))
    gpu = _gpu_cause(NodeRecord.decode(view.annotations.get(keys.ANN_GPUS)), ep)
    if gpu:
        return gpu
    found = _finding(view.annotation_json(keys.ANN_LAST_FINDING))
    if found:
        return found
    checks = _failing_checks(view.annotation_json(keys.ANN_LAST_RESULTS))
    if checks:
        return checks
    said = _attempt_cause(of_episode(decode(view.annotations.get(keys.ANN_HISTORY)), ep))
    return said or _short(fallback) or "no finding recorded"


def tried(attempts: Sequence[Attempt]) -> str:
    """``reboot, reimage did not cure it``: the rungs that ran and failed, in order; ""
    when none did."""
    steps: list[str] = []
    for a in attempts:
        if a.failed and a.step not in ("manual", "diagnose") and a.step not in steps:
            steps.append(a.step)
    if not steps:
        return ""
    return ", ".join(RUNG_WORDS.get(s, s) for s in steps) + " did not cure it"


def headline(view: NodeView, ep: int, fallback: str = "") -> str:
    """``GPU 1 lost (GPU_IS_LOST); reboot, reimage did not cure it``: the escalation's
    Event message and the email's and chat line's subject after the node."""
    attempts = of_episode(decode(view.annotations.get(keys.ANN_HISTORY)), ep)
    what = cause(view, ep, fallback)
    done = tried(attempts)
    return f"{what}; {done}" if done else what


# -- where the finding comes from ----------------------------------------------------------
def _gpu_cause(record: NodeRecord, ep: int) -> str | None:
    incidents = [i for i in record.incidents if i.ep == ep]
    if not incidents:
        return None
    first = incidents[0]
    said = FAMILY_WORDS.get(first.family, "failing")
    where = f"GPU {first.index}" if first.index is not None else f"GPU {first.serial or first.uid}"
    why = f" ({first.why})" if first.why and first.why != said else ""
    more = len({(i.key, i.family) for i in incidents}) - 1
    return _short(f"{where} {said}{why}" + (f" (+{more} more)" if more > 0 else ""))


def _finding(mark: Any) -> str | None:
    if not isinstance(mark, Mapping):
        return None
    if mark.get("summary"):
        return _short(str(mark["summary"]))
    rule = str(mark.get("rule") or "")
    m = re.fullmatch(r"(s?xid)\.(\d+)", rule)
    what = f"{'SXid' if m.group(1) == 'sxid' else 'Xid'} {m.group(2)}" if m else rule
    if not what:
        return None
    pci = f" on {mark['pci']}" if mark.get("pci") else ""
    msg = str(mark.get("msg") or mark.get("message") or "")
    return _short(f"{what}{pci}" + (f" ({msg})" if msg else ""))


def _failing_checks(results: Any) -> str | None:
    if not isinstance(results, Mapping):
        return None
    checks = results.get("checks")
    if isinstance(checks, Mapping) and checks:
        return _short("; ".join(f"{k}: {v}" for k, v in checks.items()))
    bad = [
        str(entry.get("detail") or f"{cat} {entry.get('status')}")
        for cat, entry in sorted(results.items())
        if isinstance(entry, Mapping) and entry.get("status") in ("problem", "unknown")
    ]
    return _short("; ".join(bad)) if bad else None


def _attempt_cause(attempts: Sequence[Attempt]) -> str | None:
    """The last failed attempt's own words; else the last one that ended the ladder's
    work without a repair (flap damping, an unreadable record, an RMA candidate)."""
    stopped = ("flap-damped", "abandoned", "rma-candidate", "drain-blocked")
    for a in reversed(attempts):
        if not a.failed and a.result not in stopped:
            continue
        text = shown_message(a.message, a.phase)
        if " is not healthy: " in text:
            text = text.split(" is not healthy: ", 1)[1]
        elif ": " in text:
            text = text.split(": ", 1)[1] if text.startswith(f"{a.phase} ") else text
        return _short(text) if text else None
    return None


def _short(text: str) -> str:
    one = " ".join(str(text).split())
    return one if len(one) <= CAUSE_LIMIT else one[: CAUSE_LIMIT - 1] + "…"


__all__ = ["SUBJECT_LIMIT", "cause", "headline", "shown_message", "subject", "tried"]
