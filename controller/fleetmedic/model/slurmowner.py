"""Who drained a Slurm node: the ownership rule for fleets scheduled by Slurm. Pure.

On Slurm the taint is a drain with a reason, and the tools that share a fleet tell their
drains apart by the reason's first characters (issue 28 lists them):

- ours: our prefix (``fleetmedic:`` unless configured), model/slurmreason.py;
- LBNL NHC writes ``NHC:`` and will not online a node whose reason it did not set;
- SageMaker HyperPod writes ``Action:Reboot`` / ``Action:Replace``;
- Nebius soperator writes ``[node_problem]`` / ``[hardware_problem]``;
- SchedMD's Slinky slurm-operator writes ``slurm-operator:``;
- any other reason (a human's, Slurm's own ``Not responding`` or ``reboot timed out``)
  is someone else's: ``foreign``.

A node with no reason belongs to nobody (``none``). We act only on ``ours``: a foreign
drain is never touched, never resumed, and is shown under its owner. The prefixes are data
(:data:`FOREIGN_PREFIXES`), matched case-sensitively at the very start, as each tool writes
them; our own prefix is checked first, so a site that set its prefix to one of theirs has
said the drains are ours.
"""

from __future__ import annotations

from enum import StrEnum

from fleetmedic.model.slurmreason import DEFAULT_PREFIX, is_ours


class Owner(StrEnum):
    NONE = "none"
    OURS = "ours"
    FOREIGN_NHC = "foreign_nhc"
    FOREIGN_HYPERPOD = "foreign_hyperpod"
    FOREIGN_SOPERATOR = "foreign_soperator"
    FOREIGN_SLINKY = "foreign_slinky"
    FOREIGN = "foreign"

    @property
    def foreign(self) -> bool:
        return self not in (Owner.NONE, Owner.OURS)


FOREIGN_PREFIXES: tuple[tuple[str, Owner], ...] = (
    ("NHC:", Owner.FOREIGN_NHC),
    ("Action:Reboot", Owner.FOREIGN_HYPERPOD),
    ("Action:Replace", Owner.FOREIGN_HYPERPOD),
    ("[node_problem]", Owner.FOREIGN_SOPERATOR),
    ("[hardware_problem]", Owner.FOREIGN_SOPERATOR),
    ("slurm-operator:", Owner.FOREIGN_SLINKY),
)


def owner(reason: str | None, prefix: str = DEFAULT_PREFIX) -> Owner:
    """Who set ``reason`` (a node's drain or down reason, without Slurm's ``[user@time]``)."""
    if not reason or not reason.strip():
        return Owner.NONE
    if is_ours(reason, prefix):
        return Owner.OURS
    for start, who in FOREIGN_PREFIXES:
        if reason.startswith(start):
            return who
    return Owner.FOREIGN


def may_resume(reason: str | None, prefix: str = DEFAULT_PREFIX) -> bool:
    """We resume only a drain whose reason is still ours."""
    return owner(reason, prefix) is Owner.OURS
