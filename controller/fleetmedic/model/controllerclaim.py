"""The claim a Slurm cluster's acting controller leaves on slurmctld, and what it forbids.

The leader Lease of a Slurm cluster lives in the controller's store (a directory that
every bastion of the cluster shares: docs/slurm.md, "One acting controller"). A controller
whose store is another directory (its own bastion's disk, a typo) cannot see that Lease,
and would act beside the leader. What every bastion does share is slurmctld, so the
acting controller also writes a small claim there, in the Extra field of one node it
manages (beside our repair record: ``{"fleetmedic": {...}, "fleetmedic-controller":
{...}}``): which store it leads through, who it is, whether it was elected, and when. A
controller that finds a fresh claim of another store refuses to start (and one that finds
it while acting stops), in one line.

Pure: the claim's encoding and the rule. Reading and writing it is
adapters/slurmclaim.py; when it runs is kinds/slurmha.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

CLAIM_KEY = "fleetmedic-controller"
"""The key of the claim in a node's Extra (JSON): beside our record, not in it, so it
never shows among the node's annotations."""
RENEW_EVERY = 300.0
"""Seconds between a leader's claim writes: one ``scontrol update`` (and one node read to
look for others' claims) per 5 minutes, 0.6 RPCs a minute on slurmctld."""
FRESH_FOR = 900.0
"""Seconds a claim counts after it was written: three renewals, so a leader's claim never
lapses while it leads, and a controller that died (or moved to another store) blocks a
differently configured one for at most 15 minutes. Written by the claimant's clock:
clocks may differ by minutes without changing the outcome."""


@dataclass(frozen=True)
class Claim:
    store: str  # the identity of the claimant's lease store (its store_id file)
    holder: str  # the claimant's controller identity
    elected: bool  # leader election on: others with the same store may stand by
    at: float  # epoch seconds, by the claimant's clock
    node: str = ""  # the node whose Extra holds it (not encoded)

    def encode(self) -> dict[str, Any]:
        return {"store": self.store, "holder": self.holder, "elected": self.elected, "at": self.at}

    @classmethod
    def decode(cls, data: Any, node: str = "") -> Claim | None:
        """A claim from Extra's JSON, or None when it is not one (never guessed)."""
        if not isinstance(data, Mapping):
            return None
        store, holder, elected, at = (data.get(k) for k in ("store", "holder", "elected", "at"))
        if not (isinstance(store, str) and store and isinstance(holder, str) and holder):
            return None
        if not isinstance(elected, bool) or isinstance(at, bool):
            return None
        if not isinstance(at, int | float):
            return None
        return cls(store, holder, elected, float(at), node)

    def fresh(self, now: float) -> bool:
        return now - self.at < FRESH_FOR

    def until(self) -> str:
        """When it lapses, for messages."""
        return datetime.fromtimestamp(self.at + FRESH_FOR, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def conflict(
    claims: Iterable[Claim], *, store: str, holder: str, elected: bool, now: float
) -> str | None:
    """Why a controller (``store``, ``holder``, ``elected``) must not act on a cluster
    whose nodes carry ``claims``, in one line; None when it may (no fresh claim of
    another, or one of the same store with leader election on both sides: a standby)."""
    for c in sorted(claims, key=lambda c: -c.at):
        if c.holder == holder or not c.fresh(now):
            continue
        where = f"claimed on Slurm node {c.node}" if c.node else "claimed on slurmctld"
        lapse = f"it lapses at {c.until()} unless renewed"
        if c.store != store:
            return (
                f"another controller ({c.holder}) acts on this Slurm cluster through another "
                f"lease store (store {c.store[:8]}, {where}); this one's is {store[:8]}: "
                f"give both the same shared slurm.state_dir, or stop that one ({lapse})"
            )
        if not (c.elected and elected):
            return (
                f"another controller ({c.holder}) acts on this Slurm cluster through the same "
                f"store, and leader election is off on {'it' if elected else 'this one'} "
                f"({where}): turn leader_election on for both ({lapse})"
            )
    return None
