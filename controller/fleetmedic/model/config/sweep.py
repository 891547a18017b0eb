"""Config section for diagnostic sweeps of idle nodes (issue 20 part 4).

    sweep:
      every: 6h                # a node is swept at most once per period
      max_concurrent: 2        # nodes under a sweep at once, per profile
      windows: [{days: [sat, sun], start: "01:00", end: "07:00"}]
      level: 2                 # dcgmi diag -r 2 / rvs -r 2

Set at the top level it sweeps every profile; a profile may override it (`sweep:
{enabled: false}` keeps a pool out). Unset: no sweeps at all, and no pod watch.
"""

from __future__ import annotations

from pydantic import Field

from fleetmedic.model.config.types import Duration, Section, Window


class SweepConfig(Section):
    enabled: bool = True
    """A profile's `sweep: {enabled: false}` keeps that pool out of a fleet-wide schedule."""
    every: Duration = Field(6 * 3600, ge=60)
    """A node is swept at most once per this period (its ``fleetmedic.io/last-sweep``
    annotation says when it last was). 6 h, as the AWS GPU health check suite's sweeper
    CronJob: four chances a day to catch an idle node, little lost capacity."""
    max_concurrent: int = Field(1, ge=1)
    """Nodes under a sweep at once in this pool. A sweep also starts only while the pool's
    repair budget (`safety.max_concurrent`, its percentage, `min_healthy`) has room beyond
    the repairs under way, counting sweeps as repairs; repairs never wait for sweeps. 1: a
    sweep is a convenience, never a reason to take more capacity than a single node."""
    windows: tuple[Window, ...] = ()
    """When a sweep may start (weekly windows, as `safety.maintenance_windows`). Empty: any
    time; the pool's maintenance windows do not apply (a sweep touches only idle nodes)."""
    level: int = Field(2, ge=1, le=5)
    """The vendors' diagnostic level (``dcgmi diag -r``; RVS levels go to 5). 2: minutes,
    enough to find a GPU that fails under load; 3 and 4 take hours (the quarantine rung's)."""
    playbook: str = "sweep.yml"
    """Path relative to ansible.playbook_dir (or absolute)."""
    timeout: Duration = Field(900, ge=10)
    """The whole run (ansible-runner's timeout=): DCGM's level 2 takes about 2 minutes, its
    own timeout is 11; 15 min leaves room for the SSH connection and the verdict."""
