"""``ladder.lemon``: when a GPU that keeps failing goes to a human as an RMA candidate, and
what its RMA case holds (policy/lemon.py, data/lemon_rules.yaml).

    ladder:
      lemon:
        families:
          bus-loss: {count: 2, window: 14d}   # this pool is stricter
          memory-uncorrectable: {count: 0}   # its rule off
        rma: {diag_level: 0}                 # no DCGM level 3 on this pool

The families, their findings and their default counts are data (data/lemon_rules.yaml,
each with its source); a pool only changes the numbers.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from importlib import resources
from typing import Any

import yaml
from pydantic import Field, field_validator

from fleetmedic.model.config.types import Duration, Section, parse_duration

OTHER = "other"
"""The family of a finding no family names: remembered, never a lemon on its own."""


@dataclasses.dataclass(frozen=True)
class Family:
    """One fault family of data/lemon_rules.yaml with a pool's numbers applied."""

    name: str
    description: str
    rules: tuple[str, ...]  # catalog rule ids (xid.79, amdgpu.ras-uncorrectable, ...)
    signals: tuple[str, ...]  # what `fleetmedic gpus --json` reports per GPU
    count: int  # episodes in a chain that make the GPU a lemon (0: never)
    window: float  # seconds a repair must hold to start the count over
    why: str
    source: tuple[str, ...]


@cache
def defaults() -> dict[str, Family]:
    """The families as data/lemon_rules.yaml gives them."""
    text = resources.files("fleetmedic.data").joinpath("lemon_rules.yaml").read_text()
    data = yaml.safe_load(text) or {}
    sources = data.get("sources") or {}
    out = {}
    for name, f in (data.get("families") or {}).items():
        cited = f.get("source") or ()
        cited = (cited,) if isinstance(cited, str) else tuple(cited)
        unknown = [s for s in cited if s not in sources]
        if unknown or not cited:
            raise ValueError(f"lemon_rules.yaml: family {name} cites unknown source {unknown}")
        out[name] = Family(
            name=name,
            description=str(f["description"]),
            rules=tuple(f.get("rules") or ()),
            signals=tuple(f.get("signals") or ()),
            count=int(f["count"]),
            window=parse_duration(f["window"]),
            why=" ".join(str(f.get("why", "")).split()),
            source=cited,
        )
    return out


class FamilyOverride(Section):
    count: int | None = Field(None, ge=0, le=50)
    """Episodes of this family in a chain (no repair between them held for `window`) that
    make a GPU an RMA candidate; 0 turns the rule off for this pool."""
    window: Duration | None = None
    """How long a repair must hold for the count to start over."""


class RmaConfig(Section):
    """What the RMA case phase collects for an RMA candidate (playbooks/rma_case.yml)."""

    diag_level: int = Field(3, ge=0, le=4)
    """`dcgmi diag -r` level run into the case (NVIDIA's RMA intake asks for a level-3 run;
    on AMD `rvs` at the same level). The node is going to a human anyway, so the half hour
    it takes costs no jobs; 0 where a pool's nodes have no DCGM (the case then says so)."""
    bug_report: bool = True
    """Run `nvidia-bug-report.sh` into the bundle even where `diagnostics_nvidia_bug_report`
    is off for ordinary repairs: NVIDIA's support asks for it with every RMA."""
    max_file_mb: float = Field(5, gt=0, le=100)
    """Size cap of each file of the case (the case JSON, a tool's output in it): a mail
    relay refuses big attachments, and a vendor portal its uploads."""
    playbook: str = "rma_case.yml"
    """Relative to ansible.playbook_dir: the evidence bundle with the bug report and the
    diagnostics, and the BMC's event log (playbooks/rma_case.yml)."""
    timeout: Duration = 3600
    """Level-3 diagnostics take about 30 minutes on 8 GPUs, the bug report up to 10."""


class LemonConfig(Section):
    enabled: bool = True
    """Off: GPUs are still remembered (history, status, metrics), never sent to a human
    for it."""
    families: dict[str, FamilyOverride] = Field(default_factory=dict)
    """This pool's numbers per family of data/lemon_rules.yaml."""
    rma: RmaConfig = RmaConfig()

    @field_validator("families")
    @classmethod
    def _known(cls, v: dict[str, FamilyOverride]) -> dict[str, FamilyOverride]:
        known = defaults()
        bad = [n for n in v if n not in known]
        if bad:
            raise ValueError(f"no family {bad[0]!r} (known: {', '.join(sorted(known))})")
        return v

    def family(self, name: str) -> Family | None:
        base = defaults().get(name)
        if base is None:
            return None
        over = self.families.get(name)
        if over is None:
            return base
        changes: dict[str, Any] = {}
        if over.count is not None:
            changes["count"] = over.count
        if over.window is not None:
            changes["window"] = over.window
        return dataclasses.replace(base, **changes)

    def all(self) -> tuple[Family, ...]:
        return tuple(f for n in defaults() if (f := self.family(n)) is not None)

    def longest_window(self) -> float:
        return max((f.window for f in self.all()), default=0.0)
