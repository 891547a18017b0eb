"""The reboot rung through Slurm: ``scontrol reboot ASAP nextstate=down`` and wait for the new boot.

slurmctld has slurmd run the site's RebootProgram once the node has no job left, so the
site's own way of rebooting (a BMC call, kexec, a plain ``reboot``) is used. What
slurmctld does with it, measured on 22.05.8 (tests/integration/test_slurm_fleet.py):

- The node shows ``REBOOT_REQUESTED`` until the request goes out, then ``DOWN`` with
  ``REBOOT_ISSUED`` and the reason ``<ours> : reboot issued``; when slurmd registers with a
  new boot time the flag goes, and with ``nextstate=down`` the node stays ``DOWN`` (no DRAIN
  flag) with ``<ours> : reboot issued : reboot complete``. Still ours
  (:func:`~fleetmedic.model.slurmreason.parse_reason` reads the same rung), and out of
  service until ``state=resume`` (:meth:`Slurm.unfence`), so verify runs first. 22.05
  refuses ``nextstate=drain``; ``resume`` would put the node back before our checks.
- But a DOWN node without DRAIN goes back in service, its reason cleared, as soon as its
  slurmd registers again (``ReturnToService=2``; measured after a slurmd restart and after
  a slurmctld restart). So once the node is back this step drains it again with our reason
  (``state=drain``: DOWN+DRAIN, and IDLE+DRAIN after any re-registration, still ours). The
  window left is one poll.
- If RebootProgram did not reboot the node (a failed BMC call) and it still answers with
  its old boot, slurmctld gives up after ``ResumeTimeout`` (checked periodically: 29 s with
  ResumeTimeout=10): DOWN, DRAIN cleared, reason ``<ours> : reboot issued : reboot timed
  out``, and with ``ReturnToService=2`` the node was back in service, reason cleared,
  4 s later (measured): a sick node taking jobs. So this step drains it again at once and
  fails in one line; the window left is one poll (:data:`POLL`): a site with
  ``ReturnToService=2`` has no guard from Slurm here. A node that stays gone (a slow
  boot) is not timed out by slurmctld (measured: ResumeTimeout=10, back after 60 s, the
  reboot completed normally).

When has the node rebooted? slurmctld's boot time of a node is its own clock minus the
node's uptime, in whole seconds (the uptime rounded up), so a node that merely registers
again (slurmd restarted, slurmctld restarted) can show its old boot time moved by one
second. A boot counts as new only when it is **after the request** (``boot_time >
requested_at``) and, when the boot time before the request is known, **more than**
:data:`BOOT_TIME_JITTER` **after it**. A re-registration of the old boot cannot pass the
first test unless that boot was less than a second before the request, and cannot pass
the second at all (:func:`is_new_boot`). ``requested_at`` is this bastion's clock and the
boot time slurmctld's: a reboot must take longer than the clocks differ (NTP: far less
than a second; a real host's reboot: minutes).

Never twice, across a controller SIGKILL: **before calling, the caller records the
request time** (``time.time()``, in the in-flight record in Extra, and waits out
:data:`~fleetmedic.adapters.slurm.SAVE_WINDOW_S` so a slurmctld crash cannot lose the
record but keep the reboot) and passes it as ``requested_at``; a resumed controller passes
the recorded time again. Then a second call does not ask for another reboot when the node
shows ``REBOOT_REQUESTED``/``REBOOT_ISSUED`` (our request is pending), or has booted since
``requested_at`` (it happened), or does not respond (it may be in the middle of it: the
call waits until it responds and decides then). Only a node that is up, with the boot it
had before the request and no request pending, is asked again: a request slurmctld lost
(a crash before it saved it) or that was never sent (killed between the record and the
request). ``timeout`` counts from each call: a resumed caller passes what is left.

Polling: one single-node read (adapters/slurmread.py) every :data:`POLL` seconds while one
node reboots. 22.05's single-node read has no boot time, so the boot time comes from
``boot_time(name)``: the controller passes its last poll's (``SlurmCluster.boot_time``,
at most one ``poll_interval`` old); called without it, this step reads the whole cluster
for it. A boot slurmctld judged new shows sooner in the reason: ``<ours> : reboot issued :
reboot complete`` (22.05 to 25.05 append ``reboot complete`` only when the node registers
with a boot time after the request, ``nextstate=down``), and :meth:`_Wait.back` takes that
as the new boot too: a note that stands on our reason belongs to our latest request,
because every request of ours first drops the notes of the one before (:func:`base_reason`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable

from fleetmedic.adapters.slurm import Slurm, SlurmNode
from fleetmedic.errors import PermanentError, TemporaryError, one_line
from fleetmedic.kinds.slurmdrain import UNKNOWN, check_ours
from fleetmedic.model.slurmreason import parse_reason

log = logging.getLogger(__name__)
POLL = 5.0
"""Seconds between two reads of the node while it reboots (see the module doc)."""
BOOT_TIME_JITTER = 1
"""Seconds a boot time moves when slurmd merely registers again (measured: a slurmd
restart, 1795736569 then 1795736568)."""
REBOOT_FLAGS = frozenset({"REBOOT_REQUESTED", "REBOOT_ISSUED"})
SLURM_NOTES = (" : reboot issued", " : reboot complete", " : reboot timed out")
"""What slurmctld appends to the reason of a node it reboots (issued, then complete or
timed out)."""
TIMED_OUT = "reboot timed out"  # slurmctld's note after ResumeTimeout
COMPLETE = " : reboot complete"  # slurmctld's note once the node is back from the boot


@dataclasses.dataclass(frozen=True)
class RebootResult:
    """``status``: ok (new boot, responding, still out of service with our reason), failed
    (no new boot in time, refused, or back without our reason or in service), lost (slurmctld
    did not answer at the end: what happened is unknown; look over SSH), cancelled (the
    caller is stopping: raise its Cancelled, call again later with the same
    ``requested_at``)."""

    status: str
    message: str
    requested_at: float
    boot_before: int | None
    boot_after: int | None
    issued: bool  # this call asked slurmctld for the reboot
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def is_new_boot(boot_time: int | None, requested_at: float, before: int | None = None) -> bool:
    """``boot_time`` is of a boot after the request (see the module doc)."""
    if boot_time is None or boot_time <= requested_at:
        return False
    return before is None or boot_time > before + BOOT_TIME_JITTER


def base_reason(reason: str) -> str:
    """``reason`` without the notes slurmctld appended on an earlier reboot, so a second
    reboot does not stack them."""
    for note in reversed(SLURM_NOTES):
        if reason.endswith(note):
            reason = reason[: -len(note)]
    return reason


def responding(node: SlurmNode) -> bool:
    return "NOT_RESPONDING" not in node.flags and node.state not in ("unknown", "future")


def describe(node: SlurmNode) -> str:
    flags = "+".join(sorted(node.flags))
    return (
        f"{node.state.upper()}{'+' + flags if flags else ''}, boot time {node.boot_time}, "
        f"reason {one_line(node.reason, 120)!r}"
    )


def reboot(
    slurm: Slurm,
    node: str,
    *,
    reason: str,
    timeout: float,
    requested_at: float | None = None,
    cancel: threading.Event | None = None,
    clock: Callable[[], float] = time.monotonic,
    now: Callable[[], float] = time.time,
    poll: float = POLL,
    boot_time: Callable[[str], int | None] | None = None,
) -> RebootResult:
    """Reboot ``node`` through Slurm with our ``reason`` and wait for it (see the module
    doc). ForeignDrain when the node does not carry our drain; ValueError when ``reason``
    is not ours; TemporaryError when slurmctld does not answer before anything was asked."""
    ours = parse_reason(reason, slurm.prefix)
    if ours is None:
        raise ValueError(f"refused reboot reason {reason!r}: not one of ours")
    cancel = cancel or threading.Event()
    start = clock()
    deadline = start + timeout
    booted = boot_time or (lambda name: slurm.node_full(name).boot_time)
    at = now() if requested_at is None else requested_at
    w = _Wait(slurm, node, ours.rung, at, booted, base_reason(ours.finding))
    n = w.read()
    if n.state == UNKNOWN:  # slurmctld restarted: wait until it hears from the node
        n = w.until(lambda m: m.state != UNKNOWN, deadline, cancel, clock, poll) or n
    if (
        requested_at is not None
        and not n.reason
        and not n.drain
        and n.state != "down"
        and is_new_boot(n.boot_time, w.at)
    ):
        # rebooted while no controller watched, and Slurm put it back in service without
        # our reason (ReturnToService=2 on its registration, seen after a slurmctld crash
        # under load): ours again before verify, with no reboot asked
        log.info("%s: rebooted and returned to service by Slurm: drained again", node)
        slurm.fence(node, ours.rung, ours.finding, current=n)
        n = w.read()
    check_ours(n, slurm.prefix)
    w.before = n.boot_time
    if requested_at is not None and is_new_boot(n.boot_time, w.at):
        w.before = None  # rebooted already: the boot before the request is unknown now
    elif requested_at is not None and not n.flags & REBOOT_FLAGS and not responding(n):
        # killed while it rebooted (or slurmctld lost a request it had sent): decide once
        # the node answers, so it is never asked twice
        log.info("%s: may be rebooting after a restart (%s): waiting for it", node, describe(n))
        n = (
            w.until(
                lambda m: responding(m) or is_new_boot(m.boot_time, w.at),
                deadline,
                cancel,
                clock,
                poll,
            )
            or n
        )
    if cancel.is_set():
        return w.result("cancelled", "reboot abandoned (the controller is stopping)", 0.0)
    if n.flags & REBOOT_FLAGS:
        log.info("%s: a reboot is already pending (%s): not asking again", node, describe(n))
    elif is_new_boot(n.boot_time, w.at):
        log.info("%s: rebooted since the request (%s): not asking again", node, describe(n))
    elif not responding(n):
        # slurmd runs RebootProgram, so Slurm cannot reboot a node whose slurmd does not
        # answer; and one that does not answer may be rebooting already: never ask then
        w.last = n
        why = f"not responding ({describe(n)}): no reboot asked (Slurm reboots through slurmd)"
        return w.result("failed", why, clock() - start)
    else:
        check_ours(n, slurm.prefix)
        try:
            slurm.reboot(node, base_reason(reason), nextstate="down")
        except TemporaryError:
            raise
        except PermanentError as exc:
            return w.result("failed", f"scontrol reboot refused: {exc}", clock() - start)
        w.issued = True
        log.info("%s: scontrol reboot ASAP nextstate=down (boot time %s)", node, w.before)
    w.until(w.settled, deadline, cancel, clock, poll)
    if cancel.is_set():
        return w.result(
            "cancelled", "reboot wait abandoned (the controller is stopping)", clock() - start
        )
    return w.judge(timeout, clock() - start)


@dataclasses.dataclass
class _Wait:
    """One reboot's wait: what was asked, what was last seen."""

    slurm: Slurm
    node: str
    rung: str
    at: float
    boot_time: Callable[[str], int | None]
    finding: str = ""
    before: int | None = None
    issued: bool = False
    last: SlurmNode | None = None
    error: str = ""

    def ours(self, n: SlurmNode) -> bool:
        mine = parse_reason(n.reason, self.slurm.prefix)
        return mine is not None and mine.rung == self.rung

    def read(self) -> SlurmNode:
        """The node now, with its boot time from ``boot_time`` when the read lacks one."""
        n = self.slurm.node(self.node)
        if n.boot_time is None:
            n = dataclasses.replace(n, boot_time=self.boot_time(self.node))
        return n

    def back(self, n: SlurmNode) -> bool:
        """Up again from the boot we asked for (see the module doc: the boot time, or
        slurmctld's ``reboot complete`` on our reason)."""
        if not responding(n) or n.flags & REBOOT_FLAGS:
            return False
        complete = self.ours(n) and n.reason.endswith(COMPLETE)
        return complete or is_new_boot(n.boot_time, self.at, self.before)

    def settled(self, n: SlurmNode) -> bool:
        """Nothing more to wait for: back, or no longer ours (Slurm's ``reboot timed
        out``, someone's edit). A node slurmctld has not heard from since it restarted
        (UNKNOWN, its reason not shown yet) is not judged. A node Slurm returned to service
        from our reboot before we saw it back (ReturnToService=2 on a second registration)
        is drained again with our reason, and the wait goes on until it is seen back."""
        if n.state == UNKNOWN:
            return False
        if self.returned(n):
            log.info("%s: back from the reboot and returned to service by Slurm: drained "
                     "again with our reason", self.node)  # fmt: skip
            self.slurm.fence(self.node, self.rung, self.finding, current=n)
            return False
        return self.back(n) or not self.ours(n) or TIMED_OUT in n.reason

    def returned(self, n: SlurmNode) -> bool:
        """In service with no reason after a boot since the request: Slurm's own return
        (the boot time read whole here: a rare event, and the poll's may be a poll old)."""
        if n.reason or n.drain or n.state in ("down", UNKNOWN) or n.flags & REBOOT_FLAGS:
            return False
        return is_new_boot(self.slurm.node_full(self.node).boot_time, self.at, self.before)

    def until(
        self,
        ok: Callable[[SlurmNode], bool],
        deadline: float,
        cancel: threading.Event,
        clock: Callable[[], float],
        poll: float,
    ) -> SlurmNode | None:
        """Read the node every ``poll`` until ``ok`` (that read), ``deadline`` or ``cancel``;
        a slurmctld that does not answer (restarting: it keeps the request) is read again."""
        while True:
            try:
                self.last, self.error = self.read(), ""
                if ok(self.last):
                    return self.last
            except TemporaryError as exc:
                self.error = one_line(str(exc), 200)
            if cancel.is_set() or clock() >= deadline:
                return None
            cancel.wait(max(0.0, min(poll, deadline - clock())))

    def result(self, status: str, message: str, seconds: float) -> RebootResult:
        after = self.last.boot_time if self.last else None
        return RebootResult(
            status, message, self.at, self.before, after, self.issued, seconds=seconds
        )

    def redrain(self, n: SlurmNode) -> None:
        """Drain ``n`` again with our reason (without Slurm's notes) unless it is drained."""
        mine = parse_reason(base_reason(n.reason), self.slurm.prefix)
        if mine is not None and not n.drain:
            self.slurm.fence(self.node, mine.rung, mine.finding, current=n)

    def judge(self, timeout: float, seconds: float) -> RebootResult:
        n = self.last
        if self.error or n is None:
            why = f"slurmctld did not answer at the end of the reboot wait: {self.error}"
            return self.result("lost", why, seconds)
        if self.ours(n) and TIMED_OUT in n.reason and not self.back(n):
            self.redrain(n)
            why = (
                f"Slurm gave up on the reboot (ResumeTimeout) without a new boot "
                f"({one_line(n.reason, 160)!r}); drained again with our reason, or Slurm "
                "would return the node to service (ReturnToService)"
            )
            return self.result("failed", why, seconds)
        if not self.ours(n):
            if TIMED_OUT in n.reason and parse_reason(n.reason, self.slurm.prefix) is None:
                why = (
                    "Slurm gave up on the reboot (ResumeTimeout) and set its own reason "
                    f"{one_line(n.reason, 80)!r}: not ours, so the node is no longer ours "
                    "to repair or resume; a human must look"
                )
            elif not n.reason and not n.drain:
                why = (
                    "Slurm put the node back in service without our reason before verify "
                    f"(ReturnToService on a re-registration): {describe(n)}"
                )
            else:
                why = f"the node's reason is no longer ours at rung {self.rung}: {describe(n)}"
            return self.result("failed", why, seconds)
        if not self.back(n):
            why = f"no new boot within {timeout:.0f}s of the reboot request: {describe(n)}"
            return self.result("failed", why, seconds)
        if not (n.state == "down" or n.drain):
            why = f"rebooted, but back in service before verify: {describe(n)}"
            return self.result("failed", why, seconds)
        # nextstate=down leaves the node DOWN without the DRAIN flag, and with
        # ReturnToService=2 any later registration of its slurmd (a slurmd or slurmctld
        # restart) puts it back in service and clears our reason before verify
        # (measured); drained again it comes back IDLE+DRAIN, still ours
        self.redrain(n)
        was = "?" if self.before is None else self.before
        return self.result(
            "ok", f"rebooted through Slurm: boot time {was} -> {n.boot_time}", seconds
        )
