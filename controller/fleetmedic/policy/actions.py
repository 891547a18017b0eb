"""What the policy hands to the controller loop: plain dataclasses, no behaviour
beyond :meth:`Update.apply`, a pure edit of a Node dict.

- :class:`Action`: one thing to do for one node (run a phase's playbook, probe
  the boot_id, drain, send the escalation email, write a record, or wait).
- :class:`Outcome`: what came of it, fed back to ``ladder.complete``.
- :class:`Update`: what to write on the Node, in one read-modify-write
  (``Cluster.update_node(name, update.apply_for(vocab))``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any

from fleetmedic.errors import ConflictError
from fleetmedic.model import keys, nodeedit
from fleetmedic.model.nodestate import taints_of
from fleetmedic.model.vocabulary import REPAIR_STATES, Vocabulary
from fleetmedic.policy import history
from fleetmedic.policy.history import Attempt


class Kind(StrEnum):
    """What an :class:`Action` asks of the controller (the executor has one handler each)."""

    NONE = "none"  # nothing to do (reason says why)
    WAIT = "wait"  # nothing before ``not_before``
    WRITE = "write"  # only record: apply ``update``
    RUN = "run"  # run ``playbook`` for ``phase``
    PROBE = "probe"  # read the node's boot_id
    DRAIN = "drain"  # cordon and evict (PDB-aware)
    ESCALATE = "escalate"  # send the escalation email (or the replace rung's notice)
    REPLACE = "replace"  # hand the node to its cloud for a new instance (ends its life)


HEALTHY = "healthy"
LOST = "lost"  # an Outcome's status: the execution node that ran it was lost


@dataclasses.dataclass(frozen=True)
class Event:
    reason: str
    message: str
    type: str = "Normal"


class Stale(ConflictError):
    """The Node changed (state or in-flight marker) since the decision: decide again."""


@dataclasses.dataclass(frozen=True)
class Update:
    """A write to one Node. ``expect_*`` are preconditions checked on the fresh copy, so a
    decision made on an older view can never clobber what a human did meanwhile."""

    node: str
    at: str  # RFC 3339 time of the decision
    expect_state: str | None = None  # None: don't check
    expect_inflight: str | None = "<any>"  # raw annotation value; "<any>": don't check
    state: str | None = None  # new ladder state; None: leave as is
    annotations: Mapping[str, str | None] = dataclasses.field(default_factory=dict)
    append: tuple[Attempt, ...] = ()
    history_limit: int = 40
    uncordon: bool = False  # undo our own cordon (never someone else's)
    remove_slow_network: bool = False  # only ``fleetmedic reset`` does this
    remove_taints: tuple[Mapping[str, Any], ...] = ()  # other tools' taints, exact match
    events: tuple[Event, ...] = ()

    def apply(self, node: dict, vocab: Vocabulary) -> bool:
        """Edit ``node`` in place; True if anything changed. Raises :class:`Stale`."""
        meta = node.get("metadata") or {}
        ann = meta.get("annotations") or {}
        current = vocab.repair_state_of(taints_of(node)) or HEALTHY
        if self.expect_state is not None and current != self.expect_state:
            raise Stale(f"{self.node}: state is {current}, decision was for {self.expect_state}")
        if self.expect_inflight != "<any>" and ann.get(keys.ANN_IN_FLIGHT) != self.expect_inflight:
            raise Stale(f"{self.node}: in-flight record changed since the decision")
        changed = []
        if self.state is not None:
            # every other repair taint of ours goes, also a weaker one beside the state's
            # (a preset with one key per state lets the agent add a stronger one beside ours)
            for s in REPAIR_STATES:
                if s != self.state:
                    changed.append(nodeedit.remove_taint(node, vocab.repair(s)))
            if self.state != HEALTHY:
                changed.append(nodeedit.add_taint(node, vocab.repair(self.state)))
            if self.state != current:
                changed.append(nodeedit.set_annotation(node, keys.ANN_STATE_SINCE, self.at))
        final = vocab.repair_state_of(taints_of(node)) or HEALTHY
        changed.append(nodeedit.set_label(node, keys.LABEL_STATE, final))  # selectable mirror
        if self.remove_slow_network:
            changed.append(nodeedit.remove_taint(node, vocab.slow_network))
        for taint in self.remove_taints:
            changed.append(nodeedit.remove_exact_taint(node, taint))
        for key, value in self.annotations.items():
            changed.append(nodeedit.set_annotation(node, key, value))
        if self.append:
            old = history.decode(
                (node.get("metadata") or {}).get("annotations", {}).get(keys.ANN_HISTORY)
            )
            new = history.append(old, self.append, self.history_limit)
            changed.append(nodeedit.set_annotation(node, keys.ANN_HISTORY, history.encode(new)))
        if self.uncordon and ann.get(keys.ANN_CORDONED) == "true":
            changed.append(nodeedit.set_unschedulable(node, False))
            changed.append(nodeedit.set_annotation(node, keys.ANN_CORDONED, None))
        return any(changed)

    def apply_for(self, vocab: Vocabulary) -> Callable[[dict], bool]:
        """A ``mutate`` callback for ``Cluster.update_node``."""
        return lambda node: self.apply(node, vocab)


@dataclasses.dataclass(frozen=True)
class Action:
    kind: Kind
    node: str
    reason: str
    step: str | None = None  # ladder step the action belongs to
    phase: str | None = None  # phase within the step
    ep: int = 0  # episode
    playbook: str | None = None  # RUN: absolute playbook path
    timeout: float | None = None  # RUN/PROBE/DRAIN: hard limit in seconds
    hostvars: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    update: Update | None = None  # WRITE: what to write
    not_before: datetime | None = None  # WAIT: when to look again
    force: bool = False  # DRAIN: delete pods a PDB still protects
    gpu_only: bool = False  # DRAIN: only the pods that use a GPU (the reset rung)
    resumed: bool = False  # re-run of a phase a restart interrupted
    new_work: bool = False  # takes a repair slot (budget-gated)
    disruptive: bool = False  # drains/reboots/reinstalls (window-gated)
    profile: str = "default"  # the node's profile (whose config decided this)

    def describe(self) -> str:
        what = self.kind + (f" {self.phase}" if self.phase else "")
        return f"{self.node}: {what} ({self.step or '-'}): {self.reason}"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How one node fared in one action.

    ``status``: ok | failed | unreachable | timeout (runner), lost (the run's Receptor
    execution node was lost: what it did is unknown), blocked (drain held back by a PDB),
    forbidden (the drain had to force, or the replace rung to delete the Node, but RBAC does
    not allow it), skipped (nothing was done, e.g. no SMTP configured), held (the replace
    rung's day is spent: try again at ``retry_at``).
    """

    status: str
    run_id: str | None = None
    message: str = ""
    task: str | None = None
    boot_id: str | None = None
    retry_at: str | None = None  # held: when to try again (RFC 3339)
    stdout: str = ""  # a run's last task's stdout (the quarantine's diagnostics)

    @property
    def ok(self) -> bool:
        return self.status == "ok"
