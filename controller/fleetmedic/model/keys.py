"""Label and annotation keys fleetmedic reads and writes on Node objects.

Taint names are configurable (see vocabulary.py); these keys are not, so any
tool can find fleetmedic's evidence on a node without knowing its config.
Label values must be valid label values (<=63 chars, [A-Za-z0-9._-], no ':').
"""

PREFIX = "fleetmedic.io/"

# labels (selectable)
LABEL_VENDOR = PREFIX + "gpu-vendor"  # nvidia | amd | none
LABEL_EXPECTED_GPUS = PREFIX + "expected-gpus"  # integer, e.g. "8"
LABEL_STATE = PREFIX + "state"  # healthy | reboot | reimage | manual
LABEL_SLURM_OWNER = "fleetmedic.io/slurm-owner"
"""On a Slurm node someone else drained: who (``foreign_nhc``, ...; model/slurmowner.py).
Derived from the reason by adapters/slurmcluster.py, never written."""
LABEL_SCHEDULER_RETURNS = PREFIX + "scheduler-returns-nodes"
""""true" on a node whose scheduler puts it back in service by itself after a reboot the
scheduler ran, clearing our reason exactly as a person's resume does (Slurm with
``ReturnToService=2``). Derived by adapters/slurmcluster.py, never written; policy/ladder.py
tells the two apart by it (see ``_healthy``)."""

# fleetmedic's own NodeCondition (status.conditions[].type): its verdict for tools and
# dashboards that read conditions (NPD + Draino, the autoscaler, `kubectl describe node`)
CONDITION = "FleetmedicRepair"

# annotations (evidence and bookkeeping, JSON unless noted)
ANN_SSH_HOST = PREFIX + "ssh-host"  # plain string: overrides InternalIP for SSH
ANN_STRIKES = PREFIX + "strikes"  # agent: {"gpu": n, "network": n}
ANN_LAST_RESULTS = PREFIX + "last-results"  # agent: last check results
ANN_LAST_FINDING = PREFIX + "last-finding"  # agent: last catalog finding that acted
ANN_MONITOR_COUNTS = PREFIX + "monitor-counts"  # agent: monitor findings per rule and GPU
ANN_HISTORY = PREFIX + "history"  # controller: list of attempts
ANN_IN_FLIGHT = PREFIX + "in-flight"  # controller: step under way
ANN_STATE_SINCE = PREFIX + "state-since"  # controller: RFC 3339 time of last transition
ANN_CORDONED = PREFIX + "cordoned"  # controller: "true" when we cordoned it
ANN_ESCALATED = PREFIX + "escalated"  # controller: escalation record
ANN_PAUSE = PREFIX + "pause"  # on the pause ConfigMap / any node: stop all action
ANN_FOREIGN_HANDLED = PREFIX + "foreign-handled"  # controller: signals already repaired for
ANN_ENTERED_BY = PREFIX + "entered-by"  # controller: the tool whose signal began the episode
ANN_LAST_SWEEP = PREFIX + "last-sweep"  # controller: when this node was last swept, and how
ANN_REPLACED = PREFIX + "replaced"  # controller: handed to the cloud for a new instance
ANN_QUARANTINE = PREFIX + "quarantine"  # controller: deep diagnostics' recommendation
ANN_QUARANTINE_REQUEST = PREFIX + "quarantine-request"  # a human: `fleetmedic quarantine`
ANN_PARTITION = PREFIX + "partition-layout"  # controller: GPU partitions before the repair
ANN_HANDOFF = PREFIX + "nvsentinel"  # controller: the NVSentinel request it answers (handoff.py)
ANN_RESET_GPUS = PREFIX + "reset-gpus"  # controller: the GPUs the reset rung is for (JSON list)
ANN_HOLD = PREFIX + "hold"  # controller: why the ladder stopped here for a human (JSON)
ANN_GPUS = PREFIX + "gpus"  # controller: the GPUs by identity and their incidents (model/gpus.py)
ANN_RMA = PREFIX + "rma"  # controller: the RMA case of a lemon and its ticket (policy/lemon.py)

ALL_ANNOTATIONS = (
    ANN_SSH_HOST,
    ANN_STRIKES,
    ANN_LAST_RESULTS,
    ANN_LAST_FINDING,
    ANN_MONITOR_COUNTS,
    ANN_HISTORY,
    ANN_IN_FLIGHT,
    ANN_STATE_SINCE,
    ANN_CORDONED,
    ANN_ESCALATED,
    ANN_FOREIGN_HANDLED,
    ANN_ENTERED_BY,
    ANN_LAST_SWEEP,
    ANN_REPLACED,
    ANN_QUARANTINE,
    ANN_QUARANTINE_REQUEST,
    ANN_PARTITION,
    ANN_HANDOFF,
    ANN_RESET_GPUS,
    ANN_HOLD,
    ANN_GPUS,
    ANN_RMA,
)
