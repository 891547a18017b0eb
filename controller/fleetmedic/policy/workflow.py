"""NVIDIA's Xid workflows: judge an application fault by where it repeats, not how often.

Pure: the agent (and the Loki source) read the history from the Node annotation
``fleetmedic.io/monitor-counts`` (its ``"wf"`` part, next to the counts of
:mod:`fleetmedic.policy.counts`), call :func:`judge` for one occurrence and write the
result back in the same conflict-safe update. One small evaluator per kind of
context (the catalog's ``workflows`` section names the kind per Xid):

``same-location`` (WORKFLOW_XID_13)
    ``count`` events at the same place (the catalog's ``where``: GPC and TPC, whatever
    the SM) on one GPU within ``window`` call for ``action`` (``diagnose``): the place,
    not the program, is then the suspect. Events at different places, or a solo
    event, are the application's (``otherwise``): counted for display, never fenced.
    A line that names no place (Xid 13's ``Graphics Exception: ESR ...`` line of the
    same event) is not counted.
``same-gpu`` (WORKFLOW_XID_31)
    ``count`` events on one GPU within ``window`` call for ``action``. "Repeating"
    means distinct events: lines closer than ``burst`` seconds are one fault (a
    fault prints several MMU lines at once), so one crash of a job that touches
    every GPU once (one Xid 31 on each) is across GPUs, not a repeat.
``spread`` (amdgpu page faults, as WORKFLOW_XID_31 for Xid 31)
    The place is the faulting process (the catalog's ``where``: its name, which a
    crash-looping job keeps across restarts while its pid and PASID change). Repeats by
    the same process are the application's (``otherwise``); ``count`` different
    processes on one GPU within ``window`` call for ``action``: one job does not fault in
    another's address space. A fault right after the driver reset that GPU (the
    occurrence's ``after_reset``, within the workflow's ``within``) is the aftermath of
    the hang that caused the reset and calls for ``action`` at once. A line that names no
    process is not counted (``no-place``).
``follows`` (WORKFLOW_XID_45)
    An Xid 45 (preemptive cleanup) that comes within ``within`` seconds after
    another Xid on the same GPU, or that says ``caused by previous Xid N``, follows
    that Xid and adds nothing (``otherwise``); a solo one gets ``action`` (the
    catalog's bucket). It needs no Node history: the cause comes just before it in
    the same log, which a restarted agent reads again (:func:`follows`).

State (plain JSON, bounded)::

    {"boot": "<boot id>/<segment>",
     "h": {"xid.13|0000:cb:00": {"c": "uptime", "e": [[812.4, "gpc=7,tpc=7"]], "f": 0}}}

- ``e``: events still inside the window: time (on clock ``c``, as the log wrote it)
  and place (``""`` for same-gpu);
- ``f``: the floor: events at or before it were used up (they fenced, or they were
  dropped to keep the state small) and never count again; it reaches ``burst`` past the
  last used-up event, whose later lines were part of it.

Replay-safe: an occurrence is identified by its own log time, so the same line read
again after a restart lands within ``burst`` of an event kept at the same place, or at
or below the floor, and changes nothing. A new boot starts over (see :func:`judge`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from fleetmedic.scan.xidcontext import WorkflowSpec, XidContext

MAX_KEYS = 64
"""(rule, GPU) histories kept; beyond this the stalest are forgotten (an 8-GPU node
uses at most 16: Xid 13 and 31 on each GPU)."""
CONTEXTS = (
    "same-place",
    "same-gpu",
    "different-places",
    "solo",
    "same-event",
    "no-place",
    "no-time",
    "repeating",
    "follows",
    "spreading",
    "after-reset",
)
"""What a verdict can say about its context (a bounded set: a metric label)."""
MAX_EVENTS = 48
"""Events kept per (rule, GPU). A GPU whose job faults at more than this many places
within the window is the application's; the oldest are dropped (and floored)."""


@dataclasses.dataclass(frozen=True)
class Occurrence:
    """One Xid line as the workflow sees it."""

    rule: str
    gpu: str  # the PCI id ("" when the line names none)
    when: float
    clock: str
    context: XidContext
    after_reset: str = ""  # (spread) the reset rule this fault came right after, if any


@dataclasses.dataclass(frozen=True)
class Verdict:
    state: dict[str, Any]
    changed: bool  # write the state back
    action: str  # what this occurrence calls for: spec.action when it fired, else otherwise
    fired: bool  # the context says hardware: fence at ``action`` now
    context: str  # why, one of :data:`CONTEXTS` (logs, the metrics' ``context`` label)
    detail: str = ""  # for people: where, how many, what it follows


def key_of(rule: str, gpu: str) -> str:
    return f"{rule}|{gpu}"


def clean(state: Any, boot: str) -> dict[str, Any]:
    """``state`` as this module writes it, or a fresh one (another boot, or malformed)."""
    if not isinstance(state, Mapping) or state.get("boot") != boot:
        return {"boot": boot, "h": {}}
    out: dict[str, Any] = {}
    hist = state.get("h")
    if isinstance(hist, Mapping):
        for key, entry in hist.items():
            if not isinstance(entry, Mapping):
                continue
            events = []
            for ev in entry.get("e", ()):
                if (
                    isinstance(ev, (list, tuple))
                    and len(ev) == 2
                    and isinstance(ev[0], (int, float))
                    and isinstance(ev[1], str)
                ):
                    events.append((float(ev[0]), ev[1]))
            floor = entry.get("f")
            out[str(key)] = {
                "c": str(entry.get("c", "")),
                "e": sorted(events)[-MAX_EVENTS:],
                "f": float(floor) if isinstance(floor, (int, float)) else None,
            }
    return {"boot": boot, "h": out}


def to_json(state: Mapping[str, Any]) -> dict[str, Any]:
    hist = {
        k: {
            "c": v["c"],
            "e": [list(e) for e in v["e"]],
            **({"f": v["f"]} if v["f"] is not None else {}),
        }
        for k, v in state["h"].items()
    }
    return {"boot": state["boot"], "h": hist}


def judge(state: Any, occ: Occurrence, spec: WorkflowSpec, *, boot: str) -> Verdict:
    """One occurrence of a same-location or same-gpu workflow against the history.

    ``boot`` is the boot (and log segment) the line belongs to: a new boot starts over.
    Why Xid 13's places do not survive a reboot, even within NVIDIA's 24 hours: the
    times are the kernel's (uptime, reset at boot) and cannot be compared across boots;
    a reboot of ours was followed by the ladder's verification, which judged that
    GPU since; and a place that is really broken faults again within the same boot
    (a crash-looping job meets it again within minutes), which is where the
    workflow looks. Known gap: a fault that strikes once per boot, with reboots
    between, is not seen as repeating.
    """
    fresh = clean(state, boot)
    hist = fresh["h"]
    key = key_of(spec.rule, occ.gpu)
    if spec.kind == "same-location":
        place = occ.context.location(spec.where)
        if place is None:
            return Verdict(
                fresh, False, spec.otherwise, False, "no-place", "the line names no place"
            )
    elif spec.kind == "spread":
        place = occ.context.location(spec.where)
        if place is None:
            return Verdict(
                fresh, False, spec.otherwise, False, "no-place", "the line names no process"
            )
    elif spec.kind == "same-gpu":
        place = ""
    else:
        raise ValueError(f"judge() does not evaluate {spec.kind!r} workflows")
    entry = hist.get(key)
    if entry is None or entry["c"] != occ.clock:  # times on another clock cannot be compared
        entry = {"c": occ.clock, "e": [], "f": None}
    floor = entry["f"]
    newest = max((t for t, _ in entry["e"]), default=None)
    events = [(t, p) for t, p in entry["e"] if t > occ.when - spec.window]
    here = [t for t, p in events if p == place]
    label = _label(spec, place)
    if (
        (newest is not None and occ.when <= newest - spec.window)
        or (floor is not None and occ.when <= floor)
        or any(abs(t - occ.when) <= spec.burst for t in here)
    ):
        return Verdict(fresh, False, spec.otherwise, False, "same-event", label)
    events.append((occ.when, place))
    events.sort()
    here.append(occ.when)
    if spec.kind == "spread":
        fired = bool(occ.after_reset) or len({p for _, p in events}) >= spec.count
    else:
        fired = len(here) >= spec.count
    # A used-up event's floor reaches ``burst`` past it: the lines within ``burst`` after it
    # were that same event when first read, and must stay so when read again (without the
    # margin, a replay after the fence counted such a line as a new event)
    if fired:
        # used up: these events never count again (a replay lands at or below the floor)
        entry = {"c": occ.clock, "e": [], "f": max(t for t, _ in events) + spec.burst}
    else:
        dropped = events[:-MAX_EVENTS]
        events = events[-MAX_EVENTS:]
        if dropped:  # kept small: the oldest are used up, and a replay of them is ignored
            used = dropped[-1][0] + spec.burst
            floor = used if floor is None else max(floor, used)
        entry = {"c": occ.clock, "e": events, "f": floor}
    hist[key] = entry
    if len(hist) > MAX_KEYS:
        stalest = sorted(
            hist, key=lambda k: max([t for t, _ in hist[k]["e"]] or [hist[k]["f"] or 0.0])
        )
        for old in stalest[: len(hist) - MAX_KEYS]:
            if old != key:
                del hist[old]
    if fired:
        return Verdict(fresh, True, spec.action, True, *_fired_why(spec, occ, here, events, label))
    return Verdict(fresh, True, spec.otherwise, False, _why(spec, len(here), events), label)


def _fired_why(
    spec: WorkflowSpec,
    occ: Occurrence,
    here: list[float],
    events: list[tuple[float, str]],
    label: str,
) -> tuple[str, str]:
    if spec.kind == "spread":
        if occ.after_reset:
            return "after-reset", f"{label}: within {spec.within:g}s after {occ.after_reset}"
        places = sorted({p for _, p in events})
        return "spreading", f"{len(places)} processes within {spec.window:g}s: {', '.join(places)}"
    kind = "same-place" if spec.kind == "same-location" else "same-gpu"
    return kind, f"{label}: {len(here)} times within {spec.window:g}s"


def _label(spec: WorkflowSpec, place: str) -> str:
    return f"at {place}" if place else "on this GPU"


def _why(spec: WorkflowSpec, here: int, events: list[tuple[float, str]]) -> str:
    """Why a new event did not fire: it repeats, but not ``count`` times yet; or it is
    the first at its place (``different-places`` when there are events elsewhere)."""
    if here > 1:
        return "repeating"
    if spec.kind == "same-location" and len({p for _, p in events}) > 1:
        return "different-places"
    return "solo"


@dataclasses.dataclass
class Resets:
    """The last reset per GPU (the rules a ``spread`` workflow names in ``after``), in
    memory: what a page fault comes right after. Rebuilt by reading the log again after a
    restart, as :class:`Recent` is."""

    limit: int = 256
    by_gpu: dict[str, tuple[float, str]] = dataclasses.field(default_factory=dict)

    def note(self, gpu: str, when: float, rule: str) -> None:
        self.by_gpu.pop(gpu, None)
        self.by_gpu[gpu] = (when, rule)
        while len(self.by_gpu) > self.limit:
            self.by_gpu.pop(next(iter(self.by_gpu)))

    def just_before(self, gpu: str, when: float, within: float) -> str:
        """The reset rule noted on ``gpu`` at most ``within`` seconds before ``when``."""
        last = self.by_gpu.get(gpu)
        return last[1] if last is not None and 0 <= when - last[0] <= within else ""


@dataclasses.dataclass
class Recent:
    """The last Xid per GPU (and per channel), in memory: what an Xid 45 follows.

    Bounded (``limit`` GPUs); rebuilt by reading the log again after a restart."""

    limit: int = 256
    by_gpu: dict[str, tuple[float, int]] = dataclasses.field(default_factory=dict)

    def note(self, gpu: str, when: float, code: int) -> None:
        self.by_gpu.pop(gpu, None)
        self.by_gpu[gpu] = (when, code)
        while len(self.by_gpu) > self.limit:
            self.by_gpu.pop(next(iter(self.by_gpu)))


def follows(recent: Recent, occ: Occurrence, spec: WorkflowSpec) -> Verdict:
    """Xid 45: after another Xid on the same GPU (or one the line names), or solo."""
    cause = occ.context.cause
    if cause is not None:
        return Verdict({}, False, spec.otherwise, False, "follows", f"Xid {cause} (named)")
    last = recent.by_gpu.get(occ.gpu)
    if last is not None and 0 <= occ.when - last[0] <= spec.within:
        return Verdict({}, False, spec.otherwise, False, "follows", f"Xid {last[1]}")
    return Verdict({}, False, spec.action, False, "solo", "no Xid before it on this GPU")
