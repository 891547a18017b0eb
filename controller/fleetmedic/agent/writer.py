"""Apply what the agent saw to its own Node: strikes, taints, annotations, Events.

Every write is :meth:`NodeDocs.update_node` (read, edit, patch with the
resourceVersion as a precondition, retry on 409), and the policy decision is
made *inside* the edit, on the freshly read Node. So the kernel-log thread and
the check loop can write at the same time, and a taint the controller added or
removed a moment ago is always seen: strikes never count twice or go missing.

Fences only go up: a kernel-log finding stronger than the node's repair taint raises
it in the same write (:func:`fleetmedic.policy.fenceup.raised`), even while the
controller works the node; nothing here lowers or removes a repair taint.
Slow-network is removed only by a passing network check.

The writes go through a :class:`~fleetmedic.adapters.nodedocs.NodeDocs`: the Node itself
on Kubernetes, a Slurm node's drain and Extra on Slurm (:mod:`fleetmedic.adapters.slurmdoc`).
A Slurm node someone else drained refuses every write (ForeignDrain), and so does one whose
Extra holds something not JSON (ForeignField: our record cannot live beside it): the
outcome is then ``held`` (nothing fenced, nothing recorded) and the agent says so once,
rather than retrying a write that can never succeed.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Sequence

from fleetmedic.adapters.nodedocs import NodeDocs
from fleetmedic.agent import annotations as ann
from fleetmedic.agent.watermark import Mark
from fleetmedic.checks.base import CheckResult
from fleetmedic.errors import ForeignDrain, ForeignField
from fleetmedic.model import gpuvendor, keys, nodeedit
from fleetmedic.model.vocabulary import Vocabulary
from fleetmedic.policy import counts, fenceup, netcount, workflow
from fleetmedic.policy.strikes import Decision, Observation, decide
from fleetmedic.scan.xidcontext import WorkflowSpec

log = logging.getLogger("fleetmedic.agent")
COMPONENT = "fleetmedic-agent"


def now_rfc3339(clock: Callable[[], float] = time.time) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock()))


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one write did (``before_*``: the Node as it was just before it)."""

    decision: Decision
    node: dict
    before_repair: str | None
    before_slow: bool
    raised: str | None = None  # the stronger repair state this write raised the fence to
    marked: Mark | None = None  # the finding this write recorded as the node's last-finding
    held: str | None = None  # why nothing was written (a Slurm node someone else drained)

    @property
    def fenced(self) -> str | None:
        """The repair step this write put on the node (a new fence, or a raised one)."""
        if self.held:
            return None
        if self.raised:
            return self.raised
        return self.decision.repair if self.before_repair is None and self.decision.repair else None

    @property
    def slow_network_changed(self) -> bool | None:
        want = self.decision.slow_network
        if self.held:
            return None
        return want if want is not None and want != self.before_slow else None


def observations(results: Iterable[CheckResult]) -> list[Observation]:
    return [Observation(r.category, r.status, r.name, r.action) for r in results]


class NodeWriter:
    def __init__(
        self,
        kube: NodeDocs,
        node_name: str,
        vocab: Vocabulary,
        *,
        strike_limit: int = 3,
        events: bool = True,
        clock: Callable[[], float] = time.time,
        on_write: Callable[[], None] = lambda: None,
    ) -> None:
        self.kube = kube
        self.node_name = node_name
        self.vocab = vocab
        self.strike_limit = strike_limit
        self.events = events
        self.clock = clock
        self.on_write = on_write  # metrics: a successful write
        self._held_said = ""

    def read(self) -> dict:
        return self.kube.get_node(self.node_name)

    def record_round(
        self,
        results: Sequence[CheckResult],
        skipped: dict[str, str] | None = None,
        vendor: str | None = None,
    ) -> Outcome:
        """One check round: strikes, taints and ``last-results`` in one write; given
        ``vendor`` (a Slurm node: the GPU stack the checks found), it is recorded too, once
        (model/gpuvendor.py: the reinstall phase reads it)."""
        stamp = now_rfc3339(self.clock)

        def extra(node: dict) -> bool:
            summary = ann.summarize(
                results, ann.annotation_json(node, keys.ANN_LAST_RESULTS), stamp, skipped
            )
            changed = ann.set_results(node, summary)
            if vendor:
                changed |= nodeedit.set_annotation(node, gpuvendor.RECORD_KEY, vendor)
            return changed

        return self._write(observations(results), extra)

    def record_finding(self, obs: Observation, mark: Callable[[bool], Mark]) -> Outcome:
        """A definitive kernel-log finding: fence at once (unless under repair already)
        and move the watermark to it, in the same write. ``mark(acted)`` builds it."""

        def extra(node: dict) -> bool:
            state = ann.repair_state(node, self.vocab)
            acted = state is None or fenceup.raised(state, [obs.action]) is not None
            return ann.set_finding(node, mark(acted).to_json())

        return self._write([obs], extra)

    def record_count(
        self,
        *,
        boot: str,
        key: str,
        when: float,
        clock: str,
        limit: counts.Limit,
        crossing: Observation,
        mark: Callable[[bool], Mark] | None = None,
    ) -> tuple[Outcome, counts.Added]:
        """Count one monitor finding on the Node (``monitor-counts``); when it reaches
        ``limit`` the same write fences with ``crossing`` (its ``action``) and, given
        ``mark``, records the finding as the node's last-finding."""
        obs: list[Observation] = []
        box: dict[str, counts.Added] = {}

        def extra(node: dict) -> bool:
            obs.clear()  # a 409 retries the whole edit on a fresh read
            added = counts.add(
                ann.annotation_json(node, keys.ANN_MONITOR_COUNTS),
                boot=boot,
                key=key,
                when=when,
                clock=clock,
                limit=limit,
            )
            box["added"] = added
            if added.crossed:
                obs.append(crossing)
            return ann.set_counts(node, counts.to_json(added.state)) if added.changed else False

        out = self._write(obs, extra, mark)
        return out, box["added"]

    def record_workflow(
        self,
        *,
        boot: str,
        occ: workflow.Occurrence,
        spec: WorkflowSpec,
        what: str,
        mark: Callable[[bool], Mark] | None = None,
    ) -> tuple[Outcome, workflow.Verdict]:
        """Judge one Xid by its context (NVIDIA's workflows) on the history kept on the
        Node (``monitor-counts``, ``wf``); when the context calls for ``spec.action``
        the same write fences (or raises the fence) at it and, given ``mark``, records
        the finding as the node's last-finding."""
        obs: list[Observation] = []
        box: dict[str, workflow.Verdict] = {}

        def extra(node: dict) -> bool:
            obs.clear()  # a 409 retries the whole edit on a fresh read
            verdict = workflow.judge(ann.workflow_state(node), occ, spec, boot=boot)
            box["verdict"] = verdict
            if verdict.fired:
                reason = f"{what} ({spec.bucket}: {verdict.detail})"
                obs.append(Observation("kernel", "problem", reason, verdict.action))
            if not verdict.changed:
                return False
            return ann.set_workflow(node, workflow.to_json(verdict.state))

        out = self._write(obs, extra, mark)
        return out, box["verdict"]

    def record_unclassified(
        self, *, boot: str, when: float, clock: str, rule: str, message: str
    ) -> netcount.Added:
        """A driver line no rule knows: counted on the Node with the last line (the net's
        ``net`` part of ``monitor-counts``), for ``fleetmedic status``; never a fence."""
        box: dict[str, netcount.Added] = {}
        stamp = now_rfc3339(self.clock)

        def extra(node: dict) -> bool:
            added = netcount.add(
                ann.net_state(node),
                boot=boot,
                when=when,
                clock=clock,
                rule=rule,
                message=message,
                at=stamp,
            )
            box["added"] = added
            return ann.set_net(node, added.state) if added.changed else False

        self._write([], extra)
        return box["added"]

    def record_fabric(
        self, obs: Observation, *, boot: str, when: float, clock: str, evidence: dict
    ) -> Outcome:
        """A Fabric Manager finding: fence (or raise the fence) as a kernel finding does,
        and move Fabric Manager's own watermark (``fm``: its last acted line's time) in the
        same write. When it fences, ``evidence`` becomes ``last-finding`` (the fence's
        evidence), keeping the kernel log's watermark inside it (``kernel``)."""

        def extra(node: dict) -> bool:
            return ann.set_fabric(node, {"boot": boot, "t": when, "c": clock})

        def fenced(node: dict) -> dict:
            kernel = ann.kernel_mark_json(ann.annotation_json(node, keys.ANN_LAST_FINDING))
            return {**evidence, "src": "fabricmanager", **({"kernel": kernel} if kernel else {})}

        return self._write([obs], extra, evidence=fenced)

    def _write(
        self,
        obs: list[Observation],
        extra: Callable[[dict], bool],
        mark: Callable[[bool], Mark] | None = None,
        evidence: Callable[[dict], dict] | None = None,
    ) -> Outcome:
        """One conflict-safe write. ``mark``: when this write fences or raises the fence,
        the finding that did it becomes ``last-finding`` in the same write, because that
        annotation is the fence's evidence (status, the email, quarantine's "the same
        fault again"). It is also the kernel-log watermark, and moving it here is safe:
        lines are handled in order, so every fencing line before this one was handled."""
        box: dict[str, Outcome] = {}

        def mutate(node: dict) -> bool:
            before_repair = ann.repair_state(node, self.vocab)
            before_slow = ann.slow_network(node, self.vocab)
            changed = extra(node)  # sees the node before this decision's taints
            decision = decide(
                ann.strikes_of(node),
                obs,
                in_repair=before_repair is not None,
                slow_network=before_slow,
                strike_limit=self.strike_limit,
            )
            changed |= ann.apply_decision(node, decision, self.vocab)
            asked = [o.action for o in obs if o.category == "kernel" and o.status == "problem"]
            up = fenceup.raised(before_repair, asked)
            if up is not None:
                changed |= ann.raise_repair(node, before_repair or "", up, self.vocab)
                why = ", ".join(o.name for o in obs if fenceup.raised(before_repair, [o.action]))
                decision = dataclasses.replace(decision, reason=f"definitive: {why}")
            out = Outcome(decision, node, before_repair, before_slow, up)
            if mark is not None and out.fenced:
                marked = mark(True)
                changed |= ann.set_finding(node, marked.to_json())
                out = dataclasses.replace(out, marked=marked)
            elif evidence is not None and out.fenced:
                changed |= ann.set_finding(node, evidence(node))
            box["out"] = out
            return changed

        try:
            node = self.kube.update_node(self.node_name, mutate)
        except (ForeignDrain, ForeignField) as exc:  # someone else's reason, or Extra
            return self._held(box["out"], str(exc))
        self._held_said = ""
        self.on_write()
        out = dataclasses.replace(box["out"], node=node)
        self._report(out)
        return out

    def _held(self, out: Outcome, why: str) -> Outcome:
        """Nothing was written: someone else owns the node's state. One line per change."""
        if why != self._held_said:
            log.warning("not writing %s: %s", self.node_name, why)
            self._held_said = why
        return dataclasses.replace(out, raised=None, marked=None, held=why)

    def _report(self, out: Outcome) -> None:
        d = out.decision
        if out.fenced:
            taint = self.vocab.repair(out.fenced)
            msg = f"tainted {taint.key}={taint.value}:NoSchedule: {d.reason}"
            if out.raised and out.before_repair:
                was = self.vocab.repair(out.before_repair)
                msg = f"raised {was.key}={was.value} to {taint.key}={taint.value}: {d.reason}"
            log.warning("fenced %s: %s", self.node_name, msg)
            self._event(out.node, "FleetmedicFenced", msg, "Warning")
        changed = out.slow_network_changed
        if changed is True:
            msg = (
                f"tainted {self.vocab.slow_network.key}: {self.strike_limit} consecutive "
                "network check failures"
            )
            log.warning("%s: %s", self.node_name, msg)
            self._event(out.node, "FleetmedicSlowNetwork", msg, "Warning")
        elif changed is False:
            msg = f"removed {self.vocab.slow_network.key}: network check passed"
            log.info("%s: %s", self.node_name, msg)
            self._event(out.node, "FleetmedicNetworkRecovered", msg, "Normal")

    def _event(self, node: dict, reason: str, message: str, type_: str) -> None:
        if self.events:
            self.kube.post_event(node, reason, message, type_, component=COMPONENT)
