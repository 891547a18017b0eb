"""The lifecycle every part of the controller's loop shares.

The loop (controller/loop.py) holds its parts in a list and drives them all the same way;
a part implements only the hooks it needs (the others do nothing):

==============  ==========================================================================
hook            when the loop calls it
==============  ==========================================================================
``start``       once, when the loop starts: threads and watches of its own
``restore``     at start (no leader election, or a dry run) and each time this controller
                becomes the leader: take the part's records (on the pause ConfigMap, ...)
``working``     every cycle, *before* the Nodes are read: the nodes it works on now (the
                ladder leaves them alone; a job records its end before it leaves this set,
                so a node not in it is seen with its record)
``observe``     every cycle, before the plan, with what the cycle saw (:class:`Look`)
``planned``     every cycle, after the plan, with the nodes the plan did not leave free
``written``     each change the Recorder writes to a Node (on the writer's thread: never
                raise, never block)
``cancel``      leadership lost: stop acting (runs resume on the next leader), keep records
``active``      work under way that a ``run --once`` waits for
``shutdown``    at stop, in list order, each with up to ``grace`` seconds
==============  ==========================================================================

A part is made from the loop's :class:`Context` (what every part may use), plus what is
its own; an optional part makes itself from the config (``Sweeper.if_configured(ctx)``:
the part, or None). Adding a part (a responder to another system's requests, say): one
class that subclasses :class:`Part`, and one line in the list in controller/loop.py's
``Controller`` (its place there is its place in every hook's order).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleetmedic.adapters.cluster import Cluster
    from fleetmedic.controller.leadership import Leadership
    from fleetmedic.controller.metrics import Metrics
    from fleetmedic.controller.outbox import Outbox
    from fleetmedic.model.config import Config
    from fleetmedic.model.nodestate import NodeView
    from fleetmedic.policy.actions import Action, Update
    from fleetmedic.policy.plan import Plan
    from fleetmedic.policy.profiles import Assignment


@dataclasses.dataclass(frozen=True)
class Context:
    """What every part of the loop may use, made once by the loop (controller/loop.py)."""

    cfg: Config
    cluster: Cluster
    metrics: Metrics
    clock: Callable[[], datetime]
    dry_run: bool
    watch_timeout: int  # seconds, for a part's own informer
    leadership: Leadership  # the leader Lease and the node Leases (hold, let_go)
    outbox: Outbox  # every email, chat message and ticket goes through it
    views: Callable[[], Mapping[str, NodeView]]  # the informer's Node views by name
    put: Callable[[dict], NodeView]  # a Node as written, into the informer's cache
    write: Callable[[Update], NodeView]  # the Recorder's RV-guarded write of a change
    side_job: Callable[[Callable[[], object]], None]  # a short job on the ladder's pool
    acting: Callable[[], bool]  # True while this controller may change the cluster
    wake: Callable[[], None]  # the loop looks again now


@dataclasses.dataclass(frozen=True)
class Look:
    """What one cycle saw: the Nodes, the clock, the profiles, the work under way (read
    before the Nodes)."""

    now: datetime
    views: Sequence[NodeView]
    assignment: Assignment
    busy: Mapping[str, Action]  # the ladder's workers
    working: Mapping[str, set[str]]  # part name -> its nodes (Part.working)


class Part:
    """One part of the loop (see the module doc). Subclass it and override what you need;
    ``name`` keys its nodes in :attr:`Look.working`."""

    name = "part"

    def start(self, stop: threading.Event) -> None:
        return None

    def restore(self) -> None:
        return None

    def working(self) -> set[str]:
        return set()

    def observe(self, look: Look) -> None:
        return None

    def planned(self, look: Look, plan: Plan, skip: set[str]) -> None:
        return None

    def written(self, upd: Update, view: NodeView) -> None:
        return None

    def cancel(self) -> None:
        return None

    def active(self) -> bool:
        return False

    def shutdown(self, grace: float) -> None:
        return None
