"""Taint names fleetmedic writes and reads, as data (see data/vocabulary.yaml).

Everything that asks "is this one of our taints?" goes through
:class:`Vocabulary`, so the controller, the agent and the inventory plugin can
never disagree about which taints are ours.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import cache
from typing import Any

EFFECT = "NoSchedule"
REPAIR_STATES = ("diagnose", "reset", "reboot", "power_cycle", "reimage", "replace", "manual")
"""Every repair state, mildest first. The rungs a controller climbs are ``ladder.order``
(a subset in this order); the agent may fence at any of them, and a state the
controller's ladder skips enters the next rung up (policy/rungs.py). ``replace`` hands the
node to the cloud for a new instance (a pool's ladder puts it in place of ``reimage``).
``diagnose`` is the mildest: the node is fenced while the vendor diagnostics run, and returns
untouched when they pass (policy/diagnose.py). Not to be confused with the ``diagnose``
*phase* of every repair step (evidence capture, playbooks/diagnose.yml): the state's own
phase that runs the vendor tests is called ``diagnostics``."""
NAMED = (*REPAIR_STATES, "slow_network", "maintenance")
"""Every taint fleetmedic owns. ``maintenance`` is not a repair state: a diagnostic sweep
(policy/sweep.py) keeps an idle, healthy node free of new pods with it while it runs."""


@dataclasses.dataclass(frozen=True)
class TaintName:
    key: str
    value: str

    def matches(self, taint: Mapping[str, Any]) -> bool:
        return (
            taint.get("key") == self.key
            and (taint.get("value") or "") == self.value
            and taint.get("effect", EFFECT) == EFFECT
        )

    def as_taint(self) -> dict[str, str]:
        return {"key": self.key, "value": self.value, "effect": EFFECT}


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    diagnose: TaintName
    reset: TaintName
    reboot: TaintName
    power_cycle: TaintName
    reimage: TaintName
    replace: TaintName
    manual: TaintName
    slow_network: TaintName
    maintenance: TaintName

    def repair(self, state: str) -> TaintName:
        if state not in REPAIR_STATES:
            raise ValueError(f"unknown repair state {state!r}")
        return getattr(self, state)

    def all(self) -> tuple[TaintName, ...]:
        return tuple(getattr(self, s) for s in NAMED)

    def is_ours(self, taint: Mapping[str, Any]) -> bool:
        """True for a taint fleetmedic owns (exact key, value and effect)."""
        return any(name.matches(taint) for name in self.all())

    def repair_state_of(self, taints: list[Mapping[str, Any]]) -> str | None:
        """The furthest ladder step any of ``taints`` names, or None."""
        found = [s for s in REPAIR_STATES if any(self.repair(s).matches(t) for t in taints)]
        return found[-1] if found else None

    def has_slow_network(self, taints: list[Mapping[str, Any]]) -> bool:
        return any(self.slow_network.matches(t) for t in taints)

    def with_overrides(self, data: Mapping[str, Mapping[str, str] | None]) -> Vocabulary:
        """This vocabulary with single entries replaced (``{state: {key, value}}``)."""
        unknown = set(data) - set(NAMED)
        if unknown:
            raise ValueError(f"taint vocabulary names unknown states {', '.join(sorted(unknown))}")
        return dataclasses.replace(
            self,
            **{k: TaintName(str(v["key"]), str(v.get("value", ""))) for k, v in data.items() if v},
        )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Mapping[str, str]]) -> Vocabulary:
        missing = set(NAMED) - set(data)
        if missing:
            raise ValueError(f"taint vocabulary lacks {', '.join(sorted(missing))}")
        unknown = set(data) - set(NAMED)
        if unknown:
            raise ValueError(f"taint vocabulary names unknown states {', '.join(sorted(unknown))}")
        return cls(
            **{k: TaintName(str(v["key"]), str(v.get("value", ""))) for k, v in data.items()}
        )


@cache
def presets() -> dict[str, Vocabulary]:
    # imported here: every command imports this module (through model.actions), and
    # `fleetmedic scan` reads no preset; PyYAML's import was ~8 % of its start-up
    from importlib import resources

    import yaml

    text = resources.files("fleetmedic.data").joinpath("vocabulary.yaml").read_text()
    return {name: Vocabulary.from_mapping(body) for name, body in yaml.safe_load(text).items()}


def preset(name: str = "default") -> Vocabulary:
    try:
        return presets()[name]
    except KeyError:
        raise ValueError(
            f"unknown taint preset {name!r}; known: {', '.join(sorted(presets()))}"
        ) from None
