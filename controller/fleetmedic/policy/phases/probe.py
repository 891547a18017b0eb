"""The boot-id probe of the phases that boot the node (reboot, power_cycle: phases/repair.py):
the boot_id is read before the phase runs, and read again when a restart interrupted it,
so a restart mid-way can tell whether the boot happened (a reboot is never run twice).

The read before costs no run of its own when the attempt's diagnose phase published the
boot id (the diagnostics role, :data:`PUBLISHED`): it is kept in the in-flight record
through the phases between (steps.into). Any boot after that read, ours or the node's
own, is a boot after the fault, which is what the rung is for; a diagnose that published
none (it failed, or the step has no diagnose phase) leaves the probe to run as before."""

from __future__ import annotations

from collections.abc import Mapping

from fleetmedic.model import keys
from fleetmedic.policy.actions import Action, Kind, Outcome, Update
from fleetmedic.policy.history import FAIL, UNREACHABLE, stamp
from fleetmedic.policy.inflight import PENDING, InFlight
from fleetmedic.policy.phase import Fail, Next, Verdict
from fleetmedic.policy.steps import RESULT_OF, UNKNOWN_BOOT, NodeCtx, ctx, still_rebooting

POWER_CYCLE = "power_cycle"
PUBLISHED = "fleetmedic_boot_id"
"""The diagnostics role publishes the node's boot id under this name (set_stats)."""


def published(outcome: Outcome, node: str) -> str | None:
    """The boot id a run published for ``node`` (None: it published none)."""
    by_host = outcome.data.get(PUBLISHED)
    boot_id = by_host.get(node) if isinstance(by_host, Mapping) else None
    return boot_id if isinstance(boot_id, str) and boot_id else None


def wanted(fl: InFlight, resumed: bool) -> bool:
    """Read the boot id first: before the phase runs, or after a restart interrupted it."""
    return resumed or not fl.boot_id


def act(n: NodeCtx, fl: InFlight, resumed: bool) -> Action:
    why = (
        f"a {fl.phase} was under way before a restart: did it happen?"
        if resumed
        else f"read boot_id so the {fl.phase} can be confirmed after any restart"
    )
    return n.action(Kind.PROBE, why, timeout=n.cfg.ladder.probe_timeout, **ctx(fl))


def complete(n: NodeCtx, fl: InFlight, outcome: Outcome) -> Verdict:
    now = n.now
    if fl.status == PENDING:
        if outcome.ok and outcome.boot_id:
            return _kept(n, fl.with_(boot_id=outcome.boot_id, since=stamp(now)))
        if fl.phase == POWER_CYCLE and outcome.status in ("unreachable", "timeout"):
            note = f"power-cycled without a boot id: {outcome.status} before"
            return _kept(
                n, fl.with_(boot_id=UNKNOWN_BOOT, since=stamp(now), notes=(*fl.notes, note))
            )
        return Fail(
            RESULT_OF.get(outcome.status, FAIL),
            f"could not read boot_id before the {fl.phase}: {outcome.message}",
        )
    if outcome.ok and outcome.boot_id:
        if outcome.boot_id != fl.boot_id:
            return Next((f"{fl.phase} confirmed after a restart (new boot_id)",))
        return _kept(n, fl.with_(status=PENDING, since=stamp(now), run_id=None))
    if fl.phase == POWER_CYCLE:
        # Off, or still booting: the BMC knows which. The playbook again, with the same
        # request id, powers on a node left off, waits for one booting and never cuts the
        # power twice (its record of the request is on this host), instead of waiting
        # here for a node the killed run may have left powered off.
        note = "power_cycle interrupted by a restart: run again for the same request"
        return _kept(
            n, fl.with_(status=PENDING, since=stamp(now), run_id=None, notes=(*fl.notes, note))
        )
    held = still_rebooting(n, fl, n.playbook_timeout(fl.phase))
    return held or Fail(UNREACHABLE, f"not back after the {fl.phase}: {outcome.message}")


def _kept(n: NodeCtx, fl: InFlight) -> Update:
    return n.update(annotations={keys.ANN_IN_FLIGHT: fl.encode()})
