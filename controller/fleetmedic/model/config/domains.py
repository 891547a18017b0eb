"""The ``domains:`` section: label keys that group nodes failing together (an NVLink
domain, a rack, a cloud topology block), and when their failures become one incident.

    domains:
      - key: nvidia.com/gpu.clique           # GPU feature discovery's NVLink domain
        threshold: 3                         # or "20%" of the domain's nodes
        window: 10m
      - key: example.com/rack
        threshold: "25%"
        to: [dc-ops@example.com]             # this incident's email (default: smtp.to)
        targets: [dc-ops-chat]               # its chat targets (default: those hearing `breaker`)
      - key: example.com/nvl72
        action: {playbook: domain_restart_services.yml, timeout: 30m}

A domain is every node with the same value of ``key`` (nodes without the label are in
none). When ``threshold`` of a domain's nodes are fenced within ``window`` (any fence: a
taint of ours, another tool's signal, a failed sweep), the controller opens one incident
for the domain (policy/domains.py): no per-node rung starts on its nodes, one email and
one chat message go out, and the incident closes when its nodes pass (a human repaired
the shared part) or by ``fleetmedic domain release``. With a playbook ``action`` the
controller also runs that playbook once over the domain's fenced nodes, verifies every one
of them, returns those that pass and hands the rest to their own ladders
(policy/domains_playbook.py).

Domains are fleet-wide, not per profile: a rack or an NVLink domain is physical, and may
hold nodes of two pools; one incident per domain, whatever the pools.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ValidationError, field_validator

from fleetmedic.model.config.ladder import PlaybookConfig
from fleetmedic.model.config.types import Duration, Email, Quantity, Section, TaintKey

MIN_THRESHOLD = 2
"""A threshold of one node would make every lone failure an incident: the per-node
ladder's job."""


class DomainConfig(Section):
    key: TaintKey
    """The node label that names the domain (label keys and taint keys share one grammar),
    e.g. `nvidia.com/gpu.clique`, `topology.k8s.aws/network-node-layer-3`,
    `cloud.google.com/gce-topology-subblock`, or a rack label of your own."""
    threshold: Quantity = 3
    """Fenced nodes within `window` that open the incident: a count, or a percentage of
    the domain's nodes (rounded up). 3: two nodes of one rack failing together happens by
    chance on a large fleet; three within minutes rarely does. At least 2."""
    window: Duration = 600
    """How close together the fences must come: 10 minutes, as the breaker, since a shared
    part's failure fences its nodes within a minute or two (their agents' next checks)."""
    settle: Duration = 60
    """A node newly fenced in a domain waits this long before its own rung starts, so that
    the first node of a failing domain is not rebooted before its neighbours fence too (an
    agent notices a fault within about a check interval, 30 s by default). A node alone in
    its trouble starts this much later."""
    action: Literal["hold"] | PlaybookConfig = "hold"
    """What the incident does. `hold` keeps the domain's nodes fenced, with no per-node
    rung, until they pass or a human releases the incident. `{playbook: NAME.yml, timeout:
    30m}` (the shape of a ladder playbook: a path relative to ansible.playbook_dir, and its
    job timeout, unset: ansible.job_timeout) also runs that playbook once per incident over
    the domain's fenced nodes, all in one run, with the incident's id as
    `fleetmedic_request_id` (so its roles act once per incident, also when a controller
    restart runs it again), e.g. restarting the fabric manager or the IMEX daemons on every
    tray (playbooks/domain_restart_services.yml). Then the ladder's verify runs over them:
    those that pass return to service, the others go to their own ladders, and the
    incident closes. Hold by default: what cures a shared part is the site's to say."""
    release_after: Duration | None = None
    """Hand the nodes back to their own ladders this long after the incident opened, if it
    is still open. Unset: only a pass or `fleetmedic domain release` closes it (a shared
    part rarely mends itself; rebooting the nodes one by one would not mend it either)."""
    to: tuple[Email, ...] = ()
    """The incident email's recipients (e.g. the datacenter team). Empty: `smtp.to`."""
    targets: tuple[str, ...] = ()
    """Names of `notify.targets` that get the incident's chat message. Empty: every
    target that hears `breaker` (an incident is a storm in one domain)."""

    @field_validator("action", mode="before")
    @classmethod
    def _action(cls, v: Any) -> Any:
        """One line for a bad action, not pydantic's account of both shapes."""
        if isinstance(v, Mapping):
            try:
                return PlaybookConfig.model_validate(v)
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(str(p) for p in err["loc"])
                said = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
                said = said.removeprefix("Value error, ")
                raise ValueError(f"{where}: {said}" if where else said) from None
        if v != "hold" and not isinstance(v, PlaybookConfig):
            raise ValueError(
                f"must be hold or {{playbook: NAME.yml, timeout: DURATION}}, got {v!r}"
            )
        return v

    @field_validator("threshold")
    @classmethod
    def _threshold(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < MIN_THRESHOLD:
            raise ValueError(
                f"must be at least {MIN_THRESHOLD} nodes (one node alone is the ladder's), got {v}"
            )
        if isinstance(v, str) and float(v.rstrip("%")) <= 0:
            raise ValueError(f"must be more than 0%, got {v!r}")
        return v

    @property
    def playbook(self) -> PlaybookConfig | None:
        """The domain playbook (None: the action is `hold`)."""
        return self.action if isinstance(self.action, PlaybookConfig) else None


DomainsConfig = tuple[DomainConfig, ...]
