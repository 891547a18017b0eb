r"""Run one :class:`~fleetmedic.policy.actions.Action` through the adapters and say how it
went as an :class:`~fleetmedic.policy.actions.Outcome` (what ``ladder.complete`` reads).

=========  ==========================================================  ====================
action     does                                                        outcome
=========  ==========================================================  ====================
RUN        ``action.playbook`` on the node (ansible-runner), within    ok | failed |
           ``action.timeout``; inventory of just this node with the    unreachable | timeout
           same host variables as the inventory plugin; here or on
           the execution node ``executor`` routes the node to; the
           power_cycle phase also gets the node's BMC address and
           the credential files' paths (``bmc:``; none: failed,
           without a run); the restore phase of an operator-
           managed node hands the layout to the GPU operator and
           waits for it first (migop.py; failed: no run). Before a
           disruptive phase the cluster ``settle``\ s (its record
           of the phase's start must be durable); the reboot phase
           is the cluster's ``reboot`` verb when ``ladder.
           reboot_via`` names its kind's own way
PROBE      read /proc/sys/kernel/random/boot_id over SSH               ok (``boot_id``) | ...
DRAIN      the cluster's ``drain`` verb: the node's work off it, as    ok | blocked |
           its kind drains (fleetmedic/kinds/), within the timeout;    forbidden (no grant)
           ``force`` removes what still holds it after the timeout
ESCALATE   the escalation email with history, last results and this    ok | failed | skipped
           episode's evidence bundles (the replace rung's ``notify``   (no SMTP configured)
           phase: a slot in the day's replacements first, then the     | held
           same email, saying the node is being replaced)
REPLACE    the slot in the pool's day (ledger.py; the notice reserved  ok | held | failed |
           it), then hand the node to its cloud: delete the Node       forbidden | ...
           (``delete_node``, uid precondition) or terminate its
           instance through its Auto Scaling group
           (``auto_scaling_group``: replace.yml, run on this host
           whatever the executor)
=========  ==========================================================  ====================

A run whose execution node was lost (killed, cut off, silent) is ``unreachable`` with the
execution node named in the message, so the node's history says which one failed; the
boot_id probe that follows decides whether a reboot happened, as for a node that went away.

A failed, unreachable or timed-out node is an *outcome*. An exception means the action
could not be judged at all and must not be recorded as the node's result:
:class:`Cancelled` (shutdown or lost leadership), :class:`~fleetmedic.errors.TemporaryError`
(API server, run directory) and :class:`~fleetmedic.errors.PermanentError` (a playbook
that does not parse, ansible-playbook missing: a problem of this bastion, not of the node).
The caller leaves the in-flight marker as it is then, so the phase runs again later.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml

from fleetmedic.adapters import notify, runner
from fleetmedic.adapters.cluster import Cluster
from fleetmedic.controller import channels, gpuwork, ledger, migop, outbox
from fleetmedic.errors import (
    Cancelled,
    ConfigError,
    FleetmedicError,
    ForbiddenError,
    NotFoundError,
    one_line,
)
from fleetmedic.model import keys
from fleetmedic.model.config import Config
from fleetmedic.model.hostvars import controller_host_vars
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy import escalation, lemon, partition
from fleetmedic.policy.actions import LOST, Action, Kind, Outcome
from fleetmedic.policy.history import decode, of_episode, stamp
from fleetmedic.policy.inflight import Escalated

log = logging.getLogger(__name__)


@dataclass
class Executor:
    cfg: Config
    cluster: Cluster
    cluster_name: str = ""
    on_run: Callable[[int], None] = lambda delta: None  # runs in flight, for the gauge

    def execute(
        self,
        action: Action,
        view: NodeView,
        run_id: str | None = None,
        cancel: threading.Event | None = None,
    ) -> Outcome:
        """Do ``action`` on ``view``'s node and return its outcome (see the module doc)."""
        handler = self._handlers.get(action.kind)
        if handler is None:
            raise ValueError(f"{action.node}: nothing to execute for a {action.kind} action")
        return handler(action, view, run_id, cancel or threading.Event())

    @property
    def _handlers(self) -> dict[Kind, Callable[..., Outcome]]:
        return {
            Kind.RUN: self._run,
            Kind.PROBE: self._probe,
            Kind.DRAIN: self._drain,
            Kind.ESCALATE: self._escalate,
            Kind.REPLACE: self._replace,
        }

    # -- ansible ------------------------------------------------------------
    def _target(self, view: NodeView, extra: dict | None = None) -> runner.Target:
        address, hostvars = controller_host_vars(view)
        return runner.Target(view.name, address, {**hostvars, **(extra or {})})

    def _via(self, action: Action, view: NodeView) -> runner.Via | None:
        """The execution node this node's runs go to (None: here), by profile and label."""
        ex = self.cfg.profile(action.profile).executor
        node = ex.route(view.labels)
        return runner.Via(node, ex.receptor) if node and ex.receptor else None

    def _run(
        self, action: Action, view: NodeView, run_id: str | None, cancel: threading.Event
    ) -> Outcome:
        assert action.playbook, action
        extra = self._phase_vars(action, view)
        if isinstance(extra, str):
            log.warning("%s: %s not run: %s", view.name, action.phase, extra)
            return Outcome("failed", message=extra, task="bmc")
        if action.disruptive:  # (a repair verb: the phases of policy/phases/repair.py)
            requested_at = self.cluster.settle(view, cancel)
            if action.phase == "reboot":
                rebooted = self._reboot(action, view, cancel, requested_at)
                if rebooted is not None:
                    return rebooted
        handed = migop.HandOff()
        if action.phase == partition.PHASE:  # an operator-managed node: its operator first
            restore = self.cfg.profile(action.profile).ladder.restore
            handed = migop.restore(self.cluster, view, action, restore, cancel, Cancelled)
            if handed.failed:
                return handed.failed
            extra = {**extra, **handed.hostvars}
        self.on_run(1)
        try:
            # the controller holds the node Lease itself (loop.py); the playbooks take it only
            # when a person runs them
            result = runner.run_playbook(
                action.playbook,
                [self._target(view, {**action.hostvars, **extra})],
                self.cfg.ansible,
                timeout=action.timeout,
                run_id=run_id,
                cancel=cancel.is_set,
                extravars={"fleetmedic_node_lease": False},
                via=self._via(action, view),
            )
        finally:
            self.on_run(-1)
        outcome = self._host_outcome(result, view.name, cancel)
        if action.phase in ("diagnose", lemon.PHASE) and outcome.status != LOST:
            cfg = self.cfg.profile(action.profile)
            outcome = gpuwork.gpu_history(cfg, self.cluster, view, action.ep, outcome)
            if action.phase == lemon.PHASE:
                outcome = gpuwork.rma_case(cfg, view, action.ep, outcome, self.cluster_name)
        if action.phase == "verify" and outcome.ok:
            gpuwork.repair_held_from(
                self.cfg.profile(action.profile), self.cluster, view, action.ep, outcome
            )
        if outcome.ok and handed.op:  # the history says who applied it (ladder.complete)
            note = partition.operator_note(handed.op, handed.value, handed.waited, outcome.stdout)
            outcome = dataclasses.replace(outcome, stdout=json.dumps({"note": note}))
        return outcome

    def _reboot(
        self, action: Action, view: NodeView, cancel: threading.Event, requested_at: float
    ) -> Outcome | None:
        """The kind's own reboot when ``ladder.reboot_via`` names one; None: the reboot
        playbook runs."""
        timeout = action.timeout or self.cfg.ansible.job_timeout
        via = self.cfg.profile(action.profile).ladder.reboot_via
        self.on_run(1)
        try:
            done = self.cluster.reboot(
                view,
                via=via,
                why=action.reason,
                timeout=timeout,
                requested_at=requested_at,
                cancel=cancel,
            )
        finally:
            self.on_run(-1)
        return None if done is None else Outcome(done.status, message=done.message, task=done.task)

    def _phase_vars(self, action: Action, view: NodeView) -> dict[str, Any] | str:
        """Host variables a phase needs from the config; a string says why it cannot run."""
        if action.phase == lemon.PHASE:  # the BMC's event log for the case, where there is one
            bmc = self._bmc_vars(action, view)
            return bmc if isinstance(bmc, dict) else {"rma_case_sel_missing": bmc}
        if action.phase != "power_cycle":
            return {}
        return self._bmc_vars(action, view)

    def _bmc_vars(self, action: Action, view: NodeView) -> dict[str, Any] | str:
        bmc = self.cfg.profile(action.profile).bmc
        if bmc is None:
            return "no bmc: section in the config"
        inventory = None
        if bmc.address_from == "inventory" and bmc.addresses_file:
            try:
                inventory = yaml.safe_load(bmc.addresses_file.read_text()) or {}
            except (OSError, yaml.YAMLError) as exc:
                return f"bmc.addresses_file {bmc.addresses_file}: {one_line(exc)}"
            if not isinstance(inventory, dict):
                return f"bmc.addresses_file {bmc.addresses_file}: not a mapping of node: address"
        address, where = bmc.address_for(view.name, view.labels, view.annotations, inventory)
        if address is None:
            return where
        try:
            return {**bmc.playbook_vars(), "fleetmedic_bmc_address": address}
        except ConfigError as exc:  # a credential named but no $CREDENTIALS_DIRECTORY
            return str(exc)

    def _probe(
        self, action: Action, view: NodeView, run_id: str | None, cancel: threading.Event
    ) -> Outcome:
        self.on_run(1)
        try:
            result = runner.read_boot_ids(
                [self._target(view)],
                self.cfg.ansible,
                timeout=action.timeout or self.cfg.profile(action.profile).ladder.probe_timeout,
                run_id=run_id,
                via=self._via(action, view),
            )
        finally:
            self.on_run(-1)
        outcome = self._host_outcome(result, view.name, cancel)
        if outcome.ok:
            boot_id = result.hosts[view.name].stdout.strip()
            return (
                Outcome("ok", outcome.run_id, boot_id=boot_id)
                if boot_id
                else Outcome("failed", outcome.run_id, "boot_id came back empty")
            )
        return outcome

    @staticmethod
    def _host_outcome(result: runner.RunResult, name: str, cancel: threading.Event) -> Outcome:
        if cancel.is_set() or result.status == "canceled":
            raise Cancelled(f"run {result.run_id} on {name} cancelled")
        host = result.hosts.get(name) or runner.HostResult(runner.FAILED, message="no result")
        log.info(
            "%s: run %s (%s): %s%s",
            name,
            result.run_id,
            result.executor,
            host.status,
            f" ({host.task}: {host.message})" if not host.ok else "",
        )
        if result.status == LOST:  # (the host's own status then only says "no answer")
            return Outcome(LOST, result.run_id, host.message, host.task)
        return Outcome(
            host.status,
            result.run_id,
            host.message,
            host.task,
            stdout=host.stdout,
            data=dict(host.published),
        )

    # -- drain --------------------------------------------------------------
    def _drain(
        self, action: Action, _view: NodeView, _run: object, cancel: threading.Event
    ) -> Outcome:
        """The node's work off it, as its kind drains (the cluster's ``drain`` verb)."""
        done = self.cluster.drain(
            action.node,
            self.cfg.profile(action.profile).safety.drain,
            timeout=action.timeout,
            force=action.force,
            gpu_only=action.gpu_only,
            cancel=cancel,
        )
        return Outcome(done.status, message=done.message, task=done.task)

    # -- email --------------------------------------------------------------
    def _escalate(self, action: Action, view: NodeView, *_: object) -> Outcome:
        if action.phase == "notify":
            held = self._reserve(action, view)
            if held:
                return held
        smtp = self.cfg.profile(action.profile).smtp
        reason = escalation_reason(view, action)
        if smtp is None:
            log.error("%s ESCALATED (no smtp configured, so no email): %s", view.name, reason)
            return Outcome("skipped", message="no smtp configured")
        record = Escalated.decode(view.annotations.get(keys.ANN_ESCALATED))
        at = record.decided if record else ""
        via = self.cfg.profile(action.profile).cloud.replace_via if action.phase == "notify" else ""
        if via:
            at = stamp(datetime.now(UTC))
        evidence = runner.evidence_for(view.name, self.cfg.ansible, episode=action.ep)
        esc = notify.Escalation.of(
            view,
            reason,
            at,
            episode=action.ep,
            evidence=evidence,
            cluster=self.cluster_name,
            replaced_via=via,
            headline=escalation.headline(view, action.ep, reason),
        )
        letter = channels.email(
            esc, id=f"email/escalation/{view.name}/e{action.ep}", what="escalation email",
            profile=action.profile,
        )  # fmt: skip
        try:  # one try: the ladder keeps the record and retries (ladder.after_email)
            sent = outbox.deliver_now(self.cfg, letter, channels.CHANNELS)
        except FleetmedicError as exc:  # TemporaryError (relay down), ConfigError (password)
            log.warning("%s: escalation email not sent: %s", view.name, exc)
            return Outcome("failed", message=str(exc))
        log.info("%s: escalation email sent (%s)", view.name, sent)
        return Outcome("ok", message=sent)

    # -- replace ------------------------------------------------------------
    def _replace(
        self, action: Action, view: NodeView, run_id: str | None, cancel: threading.Event
    ) -> Outcome:
        cfg = self.cfg.profile(action.profile)
        try:
            node = self.cluster.get_node(view.name)
        except NotFoundError:
            return Outcome("ok", message="the Node was gone already")
        held = self._reserve(action, view)  # (reserved before the notice: counted already)
        if held:
            return held
        if cfg.cloud.replace_via == "delete_node":
            return self._delete_node(view.name, node)
        return self._terminate(action, view, node, run_id, cancel)

    def _reserve(self, action: Action, view: NodeView) -> Outcome | None:
        """A slot in the pool's day of replacements (None), or the held outcome."""
        cfg = self.cfg.profile(action.profile)
        now = datetime.now(UTC)
        got = ledger.reserve(self.cluster, cfg, action.profile, view.name, action.ep, now)
        if got.ok:
            return None
        log.warning("%s: replacement held: %s", view.name, got.why)
        retry = stamp(got.retry_at) if got.retry_at else None
        return Outcome("held", message=got.why, retry_at=retry)

    def _delete_node(self, name: str, node: dict) -> Outcome:
        try:
            gone = self.cluster.delete_node(name, (node.get("metadata") or {}).get("uid", ""))
        except ForbiddenError as exc:
            return Outcome(
                "forbidden",
                message=f"{exc} (grant deploy/controller/replace-nodes.yaml for the replace rung)",
            )
        log.warning("%s: Node deleted: its provisioner replaces the instance", name)
        return Outcome("ok", message="Node deleted" if gone else "the Node was gone already")

    def _terminate(
        self,
        action: Action,
        view: NodeView,
        node: dict,
        run_id: str | None,
        cancel: threading.Event,
    ) -> Outcome:
        provider_id = (node.get("spec") or {}).get("providerID") or ""
        found = aws_instance(provider_id)
        if found is None:
            msg = f"spec.providerID {provider_id!r} names no AWS instance (aws:///zone/i-...)"
            return Outcome("failed", message=msg, task="providerID")
        zone, instance = found
        cloud = self.cfg.profile(action.profile).cloud
        region = cloud.region or (zone[:-1] if zone and zone[-1].isalpha() else None)
        hostvars = {
            **action.hostvars,
            "fleetmedic_instance_id": instance,
            "fleetmedic_aws_region": region,
            "fleetmedic_aws_endpoint_url": cloud.endpoint_url,
        }
        assert action.playbook, action
        # run here (the play's connection is local): a node without an address is no obstacle
        target = self._target(view, hostvars)
        target = runner.Target(target.name, target.address or "127.0.0.1", target.vars)
        self.on_run(1)
        try:
            result = runner.run_playbook(
                action.playbook,
                [target],
                self.cfg.ansible,
                timeout=action.timeout,
                run_id=run_id,
                cancel=cancel.is_set,
                extravars={"fleetmedic_node_lease": False},
            )
        finally:
            self.on_run(-1)
        outcome = self._host_outcome(result, view.name, cancel)
        if outcome.ok:  # what the playbook did, in its own words (its last task's stdout)
            said = result.hosts[view.name].stdout.strip()
            return Outcome("ok", outcome.run_id, said or f"instance {instance} terminated")
        return outcome


PROVIDER_ID = re.compile(r"^aws:///(?P<zone>[a-z0-9-]*)/(?P<id>i-[0-9a-f]+)$")


def aws_instance(provider_id: str) -> tuple[str, str] | None:
    """(availability zone, instance id) of an EC2 Node's ``spec.providerID``
    (``aws:///us-east-1a/i-0123...``), or None."""
    m = PROVIDER_ID.match(provider_id)
    return (m["zone"], m["id"]) if m else None


def escalation_reason(view: NodeView, action: Action) -> str:
    """Why a human is needed, in one line: the last failed attempt of this episode."""
    attempts = of_episode(decode(view.annotations.get(keys.ANN_HISTORY)), action.ep)
    for a in reversed(attempts):
        if a.failed or a.result in ("flap-damped", lemon.RESULT):
            where = f" at {a.phase}" if a.phase else ""
            said = escalation.shown_message(a.message, a.phase)
            return f"{a.step} attempt {a.attempt} {a.result}{where}: {said}".rstrip(": ")
    return action.reason
