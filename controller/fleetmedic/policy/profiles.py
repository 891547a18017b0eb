"""Which profile each node belongs to: pure, from the nodes' labels and the config.

Every node belongs to exactly one profile: the one whose selector matches it, or
``default`` when none does. A node two profiles select belongs to neither: the
controller leaves it alone and says so (``fleetmedic plan`` and ``run`` refuse to
start while any node is in that state), because guessing would run one pool's ladder,
budget or recipients on another pool's node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from fleetmedic.model import selector
from fleetmedic.model.config import DEFAULT_PROFILE, Config
from fleetmedic.model.nodestate import NodeView


@dataclasses.dataclass(frozen=True)
class Assignment:
    profile_of: dict[str, str]  # node -> its profile
    conflicts: dict[str, tuple[str, ...]]  # node -> the profiles that all select it
    members: dict[str, frozenset[str]] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # each cycle asks for every profile's members several times (budget, breakers)
        members: dict[str, set[str]] = {}
        for node, profile in self.profile_of.items():
            members.setdefault(profile, set()).add(node)
        object.__setattr__(self, "members", {p: frozenset(n) for p, n in members.items()})

    def nodes_of(self, profile: str) -> frozenset[str]:
        return self.members.get(profile, frozenset())

    def error(self) -> str | None:
        """One line naming the first conflict (and how many more), or None."""
        if not self.conflicts:
            return None
        node = min(self.conflicts)
        more = len(self.conflicts) - 1
        return (
            f"node {node} is selected by profiles {' and '.join(self.conflicts[node])}: a node "
            "belongs to one profile, fix the selectors"
            + (f" (and {more} more node{'s' if more > 1 else ''})" if more else "")
        )


def assign(views: Iterable[NodeView], cfg: Config) -> Assignment:
    if not cfg.profiles:  # one pool (at 5,000 nodes the loop below is a cycle's 20 %)
        return Assignment(dict.fromkeys((v.name for v in views), DEFAULT_PROFILE), {})
    selectors = [(p.name, selector.parse(p.selector)) for p in cfg.profiles]
    profile_of: dict[str, str] = {}
    conflicts: dict[str, tuple[str, ...]] = {}
    for v in views:
        hits = tuple(name for name, sel in selectors if sel.matches(v.labels))
        if len(hits) > 1:
            conflicts[v.name] = hits
        else:
            profile_of[v.name] = hits[0] if hits else DEFAULT_PROFILE
    return Assignment(profile_of, conflicts)
