"""The acting controller's claim on slurmctld (model/controllerclaim.py says what it is
and why): read from every managed node's Extra, written to one of them.

Reading costs one node read (the same as a poll); writing one ``scontrol update`` of one
node's Extra, which keeps our repair record and any other key there. The node written is
the first managed node (by name) whose Extra holds JSON or nothing and that no one else
drained: the same node on every bastion while the cluster does not change, so claims do
not pile up; a claim left on another node lapses by itself (FRESH_FOR).
"""

from __future__ import annotations

import json
import logging

from fleetmedic.adapters.slurm import Slurm, SlurmNode
from fleetmedic.errors import TemporaryError
from fleetmedic.model.controllerclaim import CLAIM_KEY, Claim
from fleetmedic.model.slurmreason import is_ours

log = logging.getLogger(__name__)


def _extra(node: SlurmNode) -> dict | None:
    if not node.extra.strip():
        return {}
    try:
        doc = json.loads(node.extra)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def read_claims(nodes: list[SlurmNode]) -> list[Claim]:
    """Every claim on ``nodes`` (a claim that is not one is skipped: never guessed)."""
    found = []
    for n in nodes:
        doc = _extra(n)
        claim = Claim.decode((doc or {}).get(CLAIM_KEY), n.name)
        if claim is not None:
            found.append(claim)
    return found


def anchor(nodes: list[SlurmNode], prefix: str) -> SlurmNode | None:
    """The node the claim goes on (see the module doc), or None when there is none."""
    for n in sorted(nodes, key=lambda n: n.name):
        if _extra(n) is not None and (not n.reason or is_ours(n.reason, prefix)):
            return n
    return None


def write_claim(slurm: Slurm, nodes: list[SlurmNode], claim: Claim) -> str:
    """Write ``claim`` on the anchor of ``nodes``; returns that node's name."""
    node = anchor(nodes, slurm.prefix)
    if node is None:
        raise TemporaryError(
            "no managed Slurm node can carry the controller's claim (every Extra holds "
            "something else, or every node is drained by someone else)",
            delay=60,
        )
    slurm.set_extra_key(node.name, CLAIM_KEY, claim.encode())
    return node.name
