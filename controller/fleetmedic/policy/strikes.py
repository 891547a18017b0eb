"""The agent's fencing policy: strikes with hysteresis, and definitive findings.

Pure: the agent feeds it what the checks and the kernel-log scanner saw and
what its Node currently says; it returns what to write. The strike counts live
in an annotation on the Node (not in the agent), so a restarted agent carries
on counting where the last one stopped.

Rules (DESIGN.md "The ladder"):
- ``strike_limit`` consecutive GPU problems -> repair ``reboot``. Any GPU pass
  resets the count; ``unknown`` neither counts nor resets (a timeout is not
  evidence either way).
- a definitive action (a catalog finding or a check that says ``reset``,
  ``reboot``, ``reimage`` or ``manual``) fences at once, at the ladder state
  :func:`fleetmedic.model.actions.fence_state` gives (``reset`` -> ``reboot``
  until the ladder has a reset rung).
- GPU work is skipped while any repair taint is on the node; its strikes
  restart from zero then, so a repaired node starts with a clean slate.
- ``strike_limit`` consecutive network problems -> ``slow-network``; one pass
  removes it. Network checks keep running on fenced nodes.
- Nothing here ever removes a repair taint: only the controller does that.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from fleetmedic.model.actions import ACTION_RANK, FENCING_ACTIONS, fence_state

__all__ = ["FENCING_ACTIONS", "Decision", "Observation", "Strikes", "decide"]


@dataclasses.dataclass(frozen=True)
class Strikes:
    gpu: int = 0
    network: int = 0

    @classmethod
    def from_json(cls, data: object) -> Strikes:
        """Tolerant decode: a malformed or missing annotation is a clean slate."""
        if not isinstance(data, Mapping):
            return cls()

        def num(key: str) -> int:
            value = data.get(key, 0)
            return value if isinstance(value, int) and 0 <= value < 10_000 else 0

        return cls(gpu=num("gpu"), network=num("network"))

    def to_json(self) -> dict[str, int]:
        return {"gpu": self.gpu, "network": self.network}


@dataclasses.dataclass(frozen=True)
class Observation:
    """One check outcome as the policy sees it."""

    category: str  # gpu | network | kernel
    status: str  # ok | problem | unknown
    name: str = ""
    action: str | None = None  # definitive: reset | reboot | reimage | manual


@dataclasses.dataclass(frozen=True)
class Decision:
    strikes: Strikes
    repair: str | None = None  # taint to add: reboot | reimage | manual
    slow_network: bool | None = None  # True add, False remove, None leave
    reason: str = ""


def _worst_action(actions: Iterable[str | None]) -> str | None:
    best = None
    for action in actions:
        if action in FENCING_ACTIONS and (best is None or ACTION_RANK[action] > ACTION_RANK[best]):
            best = action
    return best


def decide(
    strikes: Strikes,
    observations: Iterable[Observation],
    *,
    in_repair: bool,
    slow_network: bool,
    strike_limit: int = 3,
) -> Decision:
    obs = list(observations)
    gpu = [o for o in obs if o.category in ("gpu", "kernel")]
    net = [o for o in obs if o.category == "network"]

    repair, reason = None, ""
    gpu_strikes = strikes.gpu
    if in_repair:
        gpu_strikes = 0
    elif gpu:
        definitive = _worst_action(o.action for o in gpu if o.status == "problem")
        problems = [o for o in gpu if o.status == "problem"]
        if definitive:
            repair = fence_state(definitive)
            reason = "definitive: " + ", ".join(o.name for o in problems if o.action == definitive)
            gpu_strikes = 0
        elif problems:
            gpu_strikes += 1
            if gpu_strikes >= strike_limit:
                repair = "reboot"
                reason = f"{gpu_strikes} consecutive GPU check failures: " + ", ".join(
                    o.name for o in problems
                )
                gpu_strikes = 0
        elif all(o.status == "ok" for o in gpu):
            gpu_strikes = 0

    net_strikes, slow = strikes.network, None
    if net:
        if any(o.status == "problem" for o in net):
            net_strikes += 1
            if net_strikes >= strike_limit and not slow_network:
                slow = True
        elif all(o.status == "ok" for o in net):
            net_strikes = 0
            if slow_network:
                slow = False
    return Decision(Strikes(gpu=gpu_strikes, network=net_strikes), repair, slow, reason)
