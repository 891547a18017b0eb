"""Where playbooks run: on this bastion (``local``) or on a Receptor execution node.

    executor:
      receptor:                                # the mesh (unset: every run is local)
        socket: /run/receptor/receptor.sock    # the controller's own receptor node
        tls_client: mesh-client                # its tls-client for remote submission
      label: site                              # the node label that picks the route
      routes: {site-a: exec-1, site-b: exec-2} # label value -> execution node, or local
      default: local                           # unlabelled or unmapped nodes

The controller prepares each job with ``ansible-runner transmit``, submits it as a work
unit of ``work_type`` to the chosen execution node, streams its results back through
``ansible-runner process`` while it runs and releases the unit: the per-host outcomes
are those of a local run. A profile may carry its own ``executor:`` (one pool in a site of its own).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import Field, model_validator

from fleetmedic.model.config.types import ConfigPath, Duration, Section

LOCAL = "local"


class ReceptorConfig(Section):
    socket: ConfigPath = Path("/run/receptor/receptor.sock")
    """The control socket of the controller's own Receptor node (the receptor package's
    default place); the node holds the mesh's TLS client and work-signing key, so the
    controller itself needs no certificate."""
    work_type: str = "ansible-runner"
    """The work type the execution nodes run as ``ansible-runner worker`` (AWX's name)."""
    tls_client: str | None = None
    """The ``tls-client`` of the controller's node to reach remote control services with
    (mutual TLS on the mesh). Unset: plain (only for a mesh without TLS)."""
    sign_work: bool = True
    """Sign work (``work-signing``): execution nodes that verify signatures run only work
    this controller's key signed."""
    poll_interval: Duration = Field(0.25, gt=0, le=10)
    """How often the execution node's route is checked while a unit's results stream (a
    question on the run's one control-socket connection). It adds nothing to a run: the
    run ends when its stream does."""
    max_in_flight: int = Field(2, ge=1, le=64)
    """Work units this controller keeps in flight on one execution node; more runs wait
    for one to end (and be released). Stock Receptor 1.4.4 can wedge the controller's
    link to a node for good when many units come and go at once (each dials the node 3-4
    times; adapters/receptor.py). On the test mesh (2 CPUs, two execution nodes, one
    40-run batch each) 8 in flight, about 3 on the node whose link wedged, lost it within
    25 s; 4 and 2 in flight (up to about 3 and 1 per node) kept both links. 2 stays below
    what failed; it is fewer chances, not a guarantee. Raise it with a Receptor that has
    the fix (tests/receptor/patches)."""
    lost_after: Duration = Field(30, gt=0)
    """A unit whose execution node has had no route for this long is given up: its outcome
    is unknown (as for an unreachable node; the boot_id probe decides what happened).
    30 s rides out a link's blip; Receptor itself re-routes within seconds."""
    grace: Duration = Field(60, ge=0)
    """Beyond the job's own timeout, how long a unit may take to report back before it is
    given up (transmit, queueing and the results' stream)."""
    direct_results: bool = False
    """Read a unit's results straight from its execution node (a ``connect`` session to
    that node's control service through the controller's node) instead of from the
    controller's node's copy. Saves up to about 1 s per run (0.2-0.5 s on the test mesh
    on 2026-11-26, with other load on its 2 CPUs): Receptor 1.4.4's controller node
    polls a remote unit's state and output size once a second (fixed in its code, no
    setting) and copies the output only after it has seen it grow, so a short play's
    first byte reaches us ~2.3 s after submit where the play itself ends at ~1.5 s.
    Costs one more dial of the execution node per run and, with ``sign_work``, the
    work-signing private key (`signing_key`). Any failure to open the direct stream falls
    back to the usual one. Off by default: the trade-off is the operator's.

    With stock Receptor 1.4.4 it needs ``max_in_flight: 1`` (refused otherwise, unless
    `patched_receptor`): that release wedges the controller's link to a node for good when
    a packet reaches a dial it has closed, and direct reads beside other units in flight
    to the same node set that off. On the test mesh (bench/receptor_overhead.py, 100 runs
    8 at a time over two execution nodes) 2 per node wedged a link in one batch of two;
    1 per node lost none in two batches (1.44x and 1.72x the local batch's wall time,
    against 1.06x at 2). With tests/receptor/wedge_repro.py (short units, one node, no
    Ansible) at 8 in flight every run wedged within 16 s (5 of 5, also with at most one
    direct read at a time, or each opened only once its unit had started); the usual
    route at 8 did not in 150 s (478 units), nor did a patched build with direct reads
    at 8. So reading one unit per node direct and the rest the usual way would not help;
    the cap is the guard, and its throughput is the price the operator weighs against
    the time saved per run. The cap makes the wedge rarer, not impossible: in CI on
    2026-11-30 one unit alone on a fresh test mesh wedged its link within 3 s of its
    submit. Only a patched Receptor is free of it."""
    patched_receptor: bool = False
    """The controller's Receptor node carries the fix for 1.4.4's dialed-connection wedge
    (tests/receptor/patches/0001-close-dialed-packetconn.patch; no release has it yet,
    tests/receptor/patches/UPSTREAM.md is the report). It only lifts the refusal of
    `direct_results` with `max_in_flight` above 1: fleetmedic cannot tell a patched
    1.4.4 from a stock one (both say 1.4.4), so this is the operator's word."""
    signing_key: ConfigPath | None = None
    """The work-signing private key (the controller's node's ``work-signing``
    ``privatekey``, RSA PEM) that signs the direct `work results` request (a JWT, RS512,
    for that execution node only, valid for 2 minutes). Needed by `direct_results` when
    `sign_work` is on, and only then. It gives this process no new power: whoever can use
    the node's control socket can already have it sign work for any execution node. It
    must not be world-readable (refused otherwise); it is read at each run, never logged,
    and never written into a run directory."""

    @model_validator(mode="after")
    def _direct_results_settings(self) -> ReceptorConfig:
        if self.signing_key is not None and not self.direct_results:
            raise ValueError("`signing_key` is only used with `direct_results: true`")
        if self.direct_results and self.sign_work and self.signing_key is None:
            raise ValueError(
                "`direct_results` with `sign_work` needs `signing_key` (the work-signing"
                " private key)"
            )
        if self.direct_results and self.max_in_flight > 1 and not self.patched_receptor:
            raise ValueError(
                f"`direct_results` with `max_in_flight: {self.max_in_flight}` wedges stock"
                " Receptor 1.4.4's links (ReceptorConfig.direct_results): set"
                " `max_in_flight: 1`, or `patched_receptor: true` if the controller's Receptor"
                " carries the fix (tests/receptor/patches)"
            )
        return self


class ExecutorConfig(Section):
    receptor: ReceptorConfig | None = None
    """The mesh. Unset: every playbook runs on this bastion (the ``local`` executor)."""
    label: str | None = None
    """The node label whose value picks the execution node in `routes` (e.g. ``site``)."""
    routes: dict[str, str] = Field(default_factory=dict)
    """Label value -> execution node ID (Receptor's node ID), or ``local``."""
    default: str = LOCAL
    """Where a node without the label, or with a value `routes` does not name, runs:
    ``local`` or an execution node ID (e.g. a profile whose pool is all in one site)."""

    @model_validator(mode="after")
    def _mesh_when_routed(self) -> ExecutorConfig:
        remote = [n for n in (*self.routes.values(), self.default) if n != LOCAL]
        if remote and self.receptor is None:
            raise ValueError(
                f"execution node {remote[0]!r} named but no `receptor:` mesh configured"
            )
        if self.routes and not self.label:
            raise ValueError("`routes` needs the `label` whose values they map")
        return self

    def route(self, labels: Mapping[str, str]) -> str | None:
        """The execution node ID for a node with ``labels``; None: run locally."""
        value = labels.get(self.label) if self.label else None
        target = self.routes.get(value, self.default) if value is not None else self.default
        return None if target == LOCAL else target
