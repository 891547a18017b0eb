"""Context workflows in the agent and the Loki source: one judge for both.

A finding whose rule has a ``workflows`` entry in a catalog (NVIDIA's Xid 13, 31, 45; the
amdgpu page faults) is judged by its context (:mod:`fleetmedic.scan.xidcontext` reads it
from the line, :mod:`fleetmedic.policy.workflow` decides), not by a count:

- same-location / same-gpu (Xid 13, 31): the occurrence goes to the Node's history in
  one conflict-safe write (:meth:`NodeWriter.record_workflow`); when the context calls
  for it (``diagnose``), the same write fences or raises the fence. Lines closer than
  the workflow's ``burst`` at the same place are one event and cost no API call;
- spread (amdgpu page faults): like same-location, the place being the faulting process;
  a fault right after a reset of the same GPU (the workflow's ``after`` rules, noted in
  memory by :meth:`XidFlows.note` as every finding passes) fires at once;
- follows (Xid 45): decided in memory from the Xid just before it on the same GPU
  (:class:`~fleetmedic.policy.workflow.Recent`, fed every Xid), no write.

Each decision is logged and counted (``fleetmedic_agent_workflow_decisions_total``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from fleetmedic.agent.watermark import Mark
from fleetmedic.agent.writer import NodeWriter, Outcome
from fleetmedic.policy import workflow
from fleetmedic.scan import Finding
from fleetmedic.scan.xidcontext import WorkflowSpec, context_of, load_workflows

log = logging.getLogger("fleetmedic.agent")
MAX_RECENT = 4096
UNTIMED = "agent"
"""The clock of a line that carries no timestamp (timed by the agent when read)."""


class XidFlows:
    """``judge(writer, finding, ...)``: the verdict for a finding with a workflow, else None."""

    def __init__(
        self,
        specs: dict[str, WorkflowSpec] | None = None,
        *,
        on_verdict: Callable[[str, workflow.Verdict], None] = lambda rule, v: None,
    ) -> None:
        self.specs = load_workflows() if specs is None else specs
        self.on_verdict = on_verdict
        self.recent: dict[str, workflow.Recent] = {}  # per boot/node: the last Xid per GPU
        self.resets: dict[str, workflow.Resets] = {}  # per boot/node: the last reset per GPU
        self._after = {rule for s in self.specs.values() for rule in s.after}
        self._sent: dict[tuple[str, str, str], float] = {}  # (scope, key, place) -> time

    def note(self, scope: str, f: Finding, when: float) -> None:
        """Every finding: an Xid, so an Xid 45 can tell what it follows; a GPU reset, so a
        page fault can tell it came right after one."""
        if f.rule in self._after:
            resets = self.resets.setdefault(scope, workflow.Resets())
            resets.note(f.pci or "", when, f.rule)
            if len(self.resets) > MAX_RECENT:
                self.resets.pop(next(iter(self.resets)))
        if f.kind == "xid" and f.code is not None and f.rule not in self._follows_rules():
            recent = self.recent.setdefault(scope, workflow.Recent())
            recent.note(f.pci or "", when, f.code)
            if len(self.recent) > MAX_RECENT:
                self.recent.pop(next(iter(self.recent)))

    def _follows_rules(self) -> set[str]:
        return {r for r, s in self.specs.items() if s.kind == "follows"}

    def judge(
        self,
        writer: NodeWriter,
        f: Finding,
        *,
        scope: str,
        boot: str,
        when: float,
        clock: str,
        call: Callable[..., Any] = lambda what, fn: fn(),
        mark: Callable[[bool], Mark] | None = None,
    ) -> workflow.Verdict | None:
        """Judge ``f`` (seen at ``when`` on ``clock``; ``scope`` is the node or boot whose
        memory applies). ``call`` wraps the Node write (the agent's retrier); ``mark``
        builds the last-finding a fence records (:meth:`NodeWriter.record_workflow`)."""
        spec = self.specs.get(f.rule)
        if spec is None:
            return None
        context = context_of(f.message)
        if f.process and context.process is None:  # named on the report's next line
            context = dataclasses.replace(context, process=f.process)
        after = ""
        if spec.kind == "spread" and spec.after:
            after = self.resets.get(scope, workflow.Resets()).just_before(
                f.pci or "", when, spec.within
            )
        occ = workflow.Occurrence(f.rule, f.pci or "", when, clock, context, after)
        if spec.kind == "follows":
            verdict = workflow.follows(self.recent.get(scope, workflow.Recent()), occ, spec)
            self._said(f, spec, verdict)
            return verdict
        if clock == UNTIMED:
            # a line without its own time would be timed by our clock, and the same line
            # read again after a restart would look like a repeat: never judged (every
            # source the agent follows is timed; only a hand-made file is not)
            verdict = workflow.Verdict({}, False, spec.otherwise, False, "no-time", "")
            self._said(f, spec, verdict)
            return verdict
        place = occ.context.location(spec.where) if spec.where else ""
        if place is None:
            verdict = workflow.Verdict({}, False, spec.otherwise, False, "no-place", "")
            self._said(f, spec, verdict)
            return verdict
        sent = (scope, workflow.key_of(f.rule, occ.gpu), place)
        last = self._sent.get(sent)
        if last is not None and abs(when - last) <= spec.burst:
            verdict = workflow.Verdict({}, False, spec.otherwise, False, "same-event", place)
            self._said(f, spec, verdict)
            return verdict  # the same event (several lines of one fault): no API call
        what = describe(f)
        done: tuple[Outcome, workflow.Verdict] = call(
            "record workflow finding",
            lambda: writer.record_workflow(boot=boot, occ=occ, spec=spec, what=what, mark=mark),
        )
        # only once the write landed: a write that raised is tried again when the line is
        # read again, not skipped as the same event
        if len(self._sent) >= MAX_RECENT:
            self._sent.clear()
        self._sent[sent] = when
        out, verdict = done
        self._said(f, spec, verdict, out.fenced if verdict.fired else None)
        return verdict

    def _said(
        self, f: Finding, spec: WorkflowSpec, v: workflow.Verdict, fenced: str | None = None
    ) -> None:
        self.on_verdict(spec.rule, v)
        where = f" ({v.detail})" if v.detail else ""
        if v.fired:
            log.warning(
                "kernel log: %s: %s%s: %s",
                describe(f),
                v.context,
                where,
                f"fenced repair={fenced}" if fenced else "node already under repair as strong",
            )
        else:
            log.info("kernel log: %s: %s%s: %s", describe(f), v.context, where, v.action)


def describe(f: Finding) -> str:
    what = {"xid": f"Xid {f.code}", "sxid": f"SXid {f.code}"}.get(f.kind, f.rule or f.kind)
    if f.kind == "fabricmanager":
        what = f"Fabric Manager {f.rule}"
    return f"{what}{f' on {f.pci}' if f.pci else ''}"
