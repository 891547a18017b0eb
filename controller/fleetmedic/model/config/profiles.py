"""Per-pool profiles: a node selector and the sections that differ for that pool.

    profiles:
      - name: training
        selector: pool=training
        ladder: {order: [reset, reboot, reimage, manual]}
        safety: {max_concurrent: 4, maintenance_windows: [{start: "02:00", end: "06:00"}]}
      - name: inference
        selector: pool in (inference, serving)
        safety: {max_concurrent: 1, min_healthy: 90%}

A profile's sections are deep-merged over the top-level ones (``config.parse`` does it
on the raw YAML, so a profile's values are validated, and its paths resolved, exactly
like the top level's). Nodes no profile selects belong to the ``default`` profile, which
is the top level itself. Fleet-wide settings (cluster, taints, Ansible, leader election,
metrics, the pause ConfigMap) cannot differ per profile.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from fleetmedic.model import selector
from fleetmedic.model.config.types import Section

DEFAULT_PROFILE = "default"
OVERRIDABLE = (
    "ladder",
    "safety",
    "smtp",
    "notify",
    "ticket",
    "executor",
    "bmc",
    "sweep",
    "cloud",
)
"""Top-level sections a profile may override."""


class ProfileConfig(Section):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")
    """Shown in `fleetmedic status`, metric labels and the breaker's record; lowercase
    letters, digits and dashes (at most 40)."""
    selector: str
    """Kubernetes label selector (`kubectl get -l` grammar) of this profile's nodes, within
    `kube.label_selector`. A node two profiles select is an error, never a guess."""
    ladder: dict[str, Any] | None = None
    """Merged over the top-level `ladder` (e.g. another `order`, longer timeouts)."""
    safety: dict[str, Any] | None = None
    """Merged over the top-level `safety`: this pool's budget, breaker, windows, drain."""
    smtp: dict[str, Any] | None = None
    """Merged over the top-level `smtp` (e.g. another on-call list in `to`)."""
    notify: dict[str, Any] | None = None
    """Merged over the top-level `notify` (e.g. this pool's team channel in `targets`)."""
    ticket: dict[str, Any] | None = None
    """Merged over the top-level `ticket` (e.g. this pool's vendor intake)."""
    executor: dict[str, Any] | None = None
    """Merged over the top-level `executor` (e.g. this pool's execution node as `default`)."""
    bmc: dict[str, Any] | None = None
    """Merged over the top-level `bmc` (e.g. another vendor's BMCs and credentials)."""
    sweep: dict[str, Any] | None = None
    """Merged over the top-level `sweep` (this pool's schedule; `enabled: false` opts out)."""
    cloud: dict[str, Any] | None = None
    """Merged over the top-level `cloud` (this pool's replace hand-off: Karpenter or ASG)."""

    @field_validator("name")
    @classmethod
    def _not_default(cls, v: str) -> str:
        if v == DEFAULT_PROFILE:
            raise ValueError(f"{DEFAULT_PROFILE!r} is the top level itself; pick another name")
        return v

    @field_validator("selector")
    @classmethod
    def _selector(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must select something (an empty selector takes every node)")
        selector.parse(v)
        return v

    @model_validator(mode="after")
    def _fleet_wide(self) -> ProfileConfig:
        if self.safety and "pause_configmap" in self.safety:
            raise ValueError(
                "safety.pause_configmap is fleet-wide (one pause switch, one RBAC grant); "
                "set it at the top level"
            )
        return self

    def overrides(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in OVERRIDABLE if getattr(self, k) is not None}


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` merged into a copy of ``base``: mappings merge key by key, anything else
    (lists included: a profile's `order` or windows replace the top level's) replaces."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out
