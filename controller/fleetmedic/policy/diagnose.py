"""The diagnose state (issue 27 part 2): the vendor diagnostics on a fenced node, judged.
Pure.

A finding that calls for diagnostics rather than a repair (NVIDIA's WORKFLOW_XID_13/31:
faults repeating at one GPC/TPC or on one GPU, which may be hardware or may be the job;
many unclassified driver errors) fences the node at ``diagnose``, the mildest repair
state. Its step (``ladder.diagnose``) takes the pods that use the GPUs off, runs
:data:`PHASE` (``diagnostics``: ``fleetmedic diag --level ladder.diagnose_level --json``
through the quarantine's playbook, without the fabric checks) and then the ordinary
verify. Not to be confused with the ``diagnose`` *phase* of the repair steps, which only
captures evidence.

:func:`verdict` judges the run with the one reader of diag's JSON the sweeps use
(:func:`fleetmedic.policy.sweep.judge`, which knows each failed test's rung from
data/diag_catalog.yaml):

- pass: on to verify; its pass returns the node untouched (no drain beyond the GPU
  pods, no reset, no reboot), the taint and our cordon off;
- fail: the node enters the rung its failed test maps to (a failed test the catalog does
  not map: ``reboot``, the sweeps' :data:`~fleetmedic.policy.sweep.DEFAULT_RUNG`), never
  one milder than the pool's first repair rung (:func:`rung_after`);
- unknown (the run failed or timed out, the tool is missing or printed nothing
  readable): the first repair rung. Unknown is never healthy, and the finding that
  fenced the node stands: the mildest repair, whose verify judges it again.

Run once per attempt: the playbook starts the diagnostics detached on the node under the
attempt's request id and records it there, so a controller killed mid-run finds the same
run (finished or not) when it resumes, and the GPUs are not stressed twice.
"""

from __future__ import annotations

from fleetmedic.model.config import Config
from fleetmedic.model.vocabulary import REPAIR_STATES
from fleetmedic.policy import sweep
from fleetmedic.policy.actions import Outcome
from fleetmedic.policy.rungs import entry_rung

STATE = "diagnose"
PHASE = "diagnostics"
"""The diagnose step's phase that runs the vendor diagnostics."""


def hostvars(cfg: Config) -> dict[str, object]:
    """The playbook's variables for the diagnostics (quarantine.yml's, fabric off)."""
    return {"quarantine_level": cfg.ladder.diagnose_level, "quarantine_fabric": False}


def verdict(outcome: Outcome) -> sweep.Verdict:
    """What a diagnostics run said: pass, fail (with the mapped rung) or unknown."""
    return sweep.judge(outcome.status, outcome.stdout, outcome.message)


def rung_after(cfg: Config, v: sweep.Verdict) -> str:
    """The rung a node enters when its diagnostics did not pass: a failed test's rung (the
    catalog's, or reboot for a test it does not map), the pool's first repair rung for an
    unknown result; never milder than that rung, and moved up to one the pool's ladder
    has (rungs.entry_rung)."""
    first = cfg.ladder.first_repair()
    want = v.rung if v.result == sweep.FAIL and v.rung in REPAIR_STATES else first
    if REPAIR_STATES.index(want) < REPAIR_STATES.index(first):
        want = first
    return entry_rung(cfg.ladder.order, want)


def summary(cfg: Config, v: sweep.Verdict) -> str:
    return f"diagnostics level {cfg.ladder.diagnose_level}: {v.result}: {v.summary}"
