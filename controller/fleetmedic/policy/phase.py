"""What a phase declares (policy/phases/: one module per phase, and the registry).

A :class:`Phase` says, for one in-flight phase name:

- ``act(n, fl, resumed)``: the action that runs it (a playbook, a drain, a probe, an email);
- ``complete(n, fl, action, outcome)``: what its outcome means, as a :data:`Verdict`:
  :class:`Next` (passed: on to the next phase, or through the return gate to service),
  :class:`Fail` (the attempt failed: retried or the ladder climbs, steps.fail_step), or an
  :class:`~fleetmedic.policy.actions.Update` of its own (a wait, a jump to another rung);
- ``timeout(n)``: how long it may take (None: its playbook's, else the job timeout);
- ``metric``: the counter the controller keeps of its runs and the label value a run gets;
- ``status``: what ``fleetmedic status`` shows, in capitals, while it runs;
- for the return gate's phases (burn-in, quarantine: after a step's last phase, not among
  its phases): ``gate(n, fl)`` enters it when due, ``dropped(n, fl)`` says why one under way
  no longer applies, ``passed`` what the return says of it;
- ``skip(n, fl)``: why this phase is passed over without a run (None: it runs);
- ``any_step``: entered by another phase's verdict in whatever step the attempt is in
  (the RMA case, phases/rma.py, after any step's diagnose or first thing at ``manual``),
  not one of a step's configured phases;
- ``returned(n, fl)``: our fence ended while this phase ran by the scheduler's own doing,
  not a person's (False: a person's resume, which releases the repair); the ladder puts
  the fence back then (phases/repair.py: Slurm's return to service after its reboot).

Whether an action disturbs the node's work (a maintenance window holds it) is on the
action its ``act`` makes (``Action.disruptive``).

Pure: no I/O, the clock in ``n.now``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from fleetmedic.policy.actions import Action, Event, Outcome, Update

if TYPE_CHECKING:
    from fleetmedic.policy.inflight import InFlight
    from fleetmedic.policy.steps import NodeCtx


@dataclasses.dataclass(frozen=True)
class Next:
    """The phase passed: on to the next one. ``notes`` go into the attempt's history;
    ``annotations`` and ``events`` are written with the move; ``boot_id`` is the node's
    boot id the phase read (the diagnose phase), kept for the step's booting phase
    (steps.into)."""

    notes: tuple[str, ...] = ()
    run_id: str | None = None
    annotations: Mapping[str, str | None] = dataclasses.field(default_factory=dict)
    events: tuple[Event, ...] = ()
    boot_id: str | None = None


@dataclasses.dataclass(frozen=True)
class Fail:
    """The attempt failed with ``result`` (fail, unreachable, timeout) and ``message``."""

    result: str
    message: str
    run_id: str | None = None


Verdict = Next | Fail | Update


@dataclasses.dataclass(frozen=True)
class Metric:
    """A counter of the phase's runs, by one label; ``value(outcome, update)`` is a run's
    label value (None: not counted)."""

    name: str
    help: str
    label: str
    value: Callable[[Outcome, Update | None], str | None]


def _never(n: NodeCtx, fl: InFlight) -> str | None:
    return None


def _a_person(n: NodeCtx, fl: InFlight) -> bool:
    return False


@dataclasses.dataclass(frozen=True)
class Phase:
    name: str
    act: Callable[[NodeCtx, InFlight, bool], Action]
    complete: Callable[[NodeCtx, InFlight, Action, Outcome], Verdict]
    timeout: Callable[[NodeCtx], float] | None = None
    metric: Metric | None = None
    status: str = ""
    gate: Callable[[NodeCtx, InFlight], Update | None] | None = None
    dropped: Callable[[NodeCtx, InFlight], str | None] = _never
    passed: str = ""
    skip: Callable[[NodeCtx, InFlight], str | None] = _never
    any_step: bool = False
    returned: Callable[[NodeCtx, InFlight], bool] = _a_person
