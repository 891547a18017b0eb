"""The executor's part of the lemon rule (policy/lemon.py, rmaflow.py): after a diagnose
or case phase run, the GPUs' incidents into the store, the past of the node's GPUs handed
to ladder.complete with the outcome, and after the case phase, the case files.

I/O only around the pure judgement: the store (controller/gpustore.py) and the files
(controller/rmacase.py).
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import UTC, datetime

from fleetmedic.adapters.cluster import Cluster
from fleetmedic.controller import gpustore, rmacase
from fleetmedic.errors import FleetmedicError
from fleetmedic.model import keys
from fleetmedic.model.config import Config
from fleetmedic.model.gpus import NodeRecord
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy import lemon, rmaflow
from fleetmedic.policy.actions import Outcome
from fleetmedic.policy.history import stamp

log = logging.getLogger(__name__)


def gpu_history(
    cfg: Config, cluster: Cluster, view: NodeView, ep: int, outcome: Outcome
) -> Outcome:
    """Record the episode's GPU incidents (and the node's older ones, if an earlier write
    was lost) in the store, and hand the past of the node's GPUs to ladder.complete. A
    store that cannot be reached only costs the fleet-wide view: the node's own record
    still counts (logged)."""
    report = lemon.report_of(outcome.data, view.name)
    if report is None:
        return outcome
    now = datetime.now(UTC)
    try:
        judged = lemon.judge(view, report, gpustore.read(cluster, cfg), ep, now, cfg.ladder.lemon)
        mine = {g.key for g in judged.record.gpus if g.key}
        fleet = gpustore.record(cluster, cfg, judged.record.incidents, now)
    except FleetmedicError as exc:
        log.warning("%s: GPU history not in the store (the node keeps its own): %s", view.name, exc)
        return outcome
    past = [i.to_json() for i in fleet.all() if i.key in mine]
    return dataclasses.replace(outcome, data={**outcome.data, rmaflow.HISTORY_KEY: past})


def repair_held_from(
    cfg: Config, cluster: Cluster, view: NodeView, ep: int, outcome: Outcome
) -> None:
    """A verify passed: the episode's incidents are back in service now, in the store too
    (a GPU moved to another node counts how long this repair held from there). Nothing
    when the episode held none; a store that cannot be reached is logged."""
    record = NodeRecord.decode(view.annotations.get(keys.ANN_GPUS))
    if not any(i.ep == ep and i.node == view.name for i in record.incidents):
        return
    now = datetime.now(UTC)
    learned = lemon.learn(view, lemon.report_of(outcome.data, view.name), now, ep)
    try:
        gpustore.record(cluster, cfg, learned.incidents, now)
    except FleetmedicError as exc:
        log.warning("%s: GPU history not in the store (the node keeps its own): %s", view.name, exc)


def rma_case(cfg: Config, view: NodeView, ep: int, outcome: Outcome, cluster: str) -> Outcome:
    """Write the case file of each RMA candidate beside the evidence (rmacase.py). A node
    that began with the case (fenced for hands: rmaflow.case_first) has no record yet: its
    candidates are judged from this run's report, and the record goes to ladder.complete
    with the outcome, so the files and the Node name one case."""
    fleet = rmaflow.fleet_of(outcome)
    record = rmaflow.RmaRecord.decode(view.annotations.get(keys.ANN_RMA))
    data = dict(outcome.data)
    report = lemon.report_of(outcome.data, view.name)
    if (record is None or record.ep != ep) and report is not None:
        now = datetime.now(UTC)
        judged = lemon.judge(view, report, fleet, ep, now, cfg.ladder.lemon)
        record = None
        if judged.lemons:
            record = rmaflow.record_of(judged.lemons, ep, stamp(now), ticket=cfg.ticket is not None)
            data[rmaflow.RECORD_KEY] = record.encode()
    paths = []
    if record is not None and record.ep == ep:
        paths = rmacase.write(cfg, view, outcome, fleet, ep, cluster, record)
    data[rmaflow.CASES_KEY] = [str(p) for p in paths]
    return dataclasses.replace(outcome, data=data)
