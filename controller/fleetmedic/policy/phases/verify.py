"""``verify``: the same checks the agent runs (``fleetmedic check``, playbooks/verify.yml),
so a pass means what fencing meant; a step's attempt passes only through it (then the
return gate: phases/burnin.py, phases/quarantine.py)."""

from __future__ import annotations

from fleetmedic.policy.phase import Phase
from fleetmedic.policy.phases.playbook import run_playbook, run_verdict

PHASES = (
    Phase(
        "verify",
        lambda n, fl, resumed: run_playbook(n, fl, resumed),
        lambda n, fl, action, outcome: run_verdict(n, fl, action, outcome),
    ),
)
