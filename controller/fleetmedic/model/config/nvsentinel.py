"""The ``nvsentinel:`` section: fleetmedic as NVSentinel's external remediator (issue 41).

    nvsentinel:
      enabled: true                  # off by default; needs deploy/controller/nvsentinel.yaml
      custom_actions:                # ERRs made from a CUSTOM action (NVSentinel's tutorial)
        external-remediation: null   #   null: read the fault from its errorCode and isFatal

NVSentinel hands a node it cannot repair to an external system with an
ExternalRemediationRequest (ERR): it releases the node (its taint
``nvsentinel.dgxc.nvidia.com/external-remediation=<ERR name>`` and the label
``nvsentinel.dgxc.nvidia.com/managed=false``), the external system repairs it and writes
``ExternalRemediationComplete`` on the ERR, and NVSentinel takes the node back. With this
section on, the controller answers released ERRs with its own ladder (controller/handoff.py,
policy/nvsentinel.py) and starts nothing on a node NVSentinel is still working on.

Every name below is NVSentinel's own, as its released CRD and code have them; change one
only when your NVSentinel differs (the controller checks at start-up that the API server
serves the ERR in ``api_group``/``version`` and says which group it found otherwise).
See docs/nvsentinel.md.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fleetmedic.model.config.types import Section, TaintKey

Rung = Literal["diagnose", "reset", "reboot", "power_cycle", "reimage", "replace", "manual"]

WORKING_STATES = ("quarantined", "draining", "drain-succeeded", "remediating")
"""Values of NVSentinel's state label while its own pipeline still works on a node
(fault-quarantine, node-drainer, fault-remediation): with the hand-off on, fault-remediation
acts after ``drain-succeeded`` (or hands the node over), so that state is NVSentinel's too.
Checked against NVSentinel's own sources: its state manager (commons/pkg/statemanager)
moves the label quarantined -> draining -> drain-succeeded | drain-failed -> remediating ->
remediation-succeeded | remediation-failed, node-drainer's reconciler writes
``drain-succeeded`` after the evictions, and its cordoned-nodes runbook names exactly these
four as "an active remediation flow" (``drain-failed`` and ``remediation-failed`` are its
terminal states, for a person)."""


class NvsentinelConfig(Section):
    enabled: bool = False
    """Answer NVSentinel's ExternalRemediationRequests. Off by default: it needs NVSentinel's
    CRD on the cluster and the opt-in grant deploy/controller/nvsentinel.yaml."""
    api_group: str = "nvsentinel.dgxc.nvidia.com"
    """The ERR's API group as NVSentinel releases it (its design doc, ADR-040, named
    `nvsentinel.nvidia.com`; the released CRD does not)."""
    version: str = "v1"
    """The ERR's served version (the released CRD's only one)."""
    release_taint: TaintKey = "nvsentinel.dgxc.nvidia.com/external-remediation"
    """The taint NVSentinel's janitor puts on a node it releases (value: the ERR's name).
    fleetmedic acts only while it is there with that value, and never removes it."""
    managed_label: TaintKey = "nvsentinel.dgxc.nvidia.com/managed"
    """NVSentinel's opt-out label: `false` while the node is released. fleetmedic acts only
    while it says `false`, and never removes it (completing the ERR does)."""
    state_label: TaintKey = "dgxc.nvidia.com/nvsentinel-state"
    """The label NVSentinel's pipeline keeps on a node it works on (quarantined, draining,
    drain-succeeded, remediating, ...)."""
    working_states: tuple[str, ...] = WORKING_STATES
    """State-label values during which NVSentinel owns the node: fleetmedic starts no repair
    there (a repair of ours already under way goes on: it was first)."""
    custom_actions: dict[str, Rung | None] = Field(default_factory=dict)
    """An ERR whose recommendedAction is CUSTOM names its action in customRecommendedAction
    (NVSentinel's tutorial uses `external-remediation`): that name -> the rung to start at,
    or null to read the fault from the request's errorCode and isFatal (the default for
    any name not listed)."""
    events: bool = True
    """Post a Kubernetes Event on the ERR at each rung (besides its condition's message)."""
