"""The Slurm kind: Slurm nodes through the Slurm client tools as node documents (our drain
with its reason is the repair taint, the record in Extra is the annotations:
adapters/slurmcluster.py, adapters/slurmdoc.py), Leases and ConfigMaps in a file store
under ``slurm.state_dir`` (adapters/filestore.py), Events as JSON lines beside it.

- connect: slurmctld through ``slurm.conf`` (model/config/slurm.py); ``--kubeconfig`` is
  refused in one line;
- node-side writers: one adapter for every thread of the process, which serializes their
  writes (Slurm has no resourceVersion to do it);
- preflight: the named slurm.conf exists; the state directory can be made;
- start-up preparation: the store checked (bastions share it), the pause ConfigMap made
  in it (nobody ships it here), the controller claims on slurmctld read; the loop's
  Leadership then judges Leases by its own clock and renews the claim (kinds/slurmha.py);
- the verbs: drain requeues the node's jobs and waits for them (kinds/slurmdrain.py);
  settle waits until slurmctld has saved the record before a disruptive phase
  (adapters/slurmsave.py); reboot, with
  ``ladder.reboot_via: slurm``, is ``scontrol reboot ASAP nextstate=down`` and the wait
  for the new boot (kinds/slurmreboot.py). No pods: sweeps, domains and replace are
  refused by the config (model/config: ``kind: slurm``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleetmedic.adapters import slurmdoc
from fleetmedic.adapters.cluster import Cluster, Done, Pods
from fleetmedic.adapters.filestore import FileStore
from fleetmedic.adapters.nodedocs import NodeDocs
from fleetmedic.adapters.slurm import Slurm, check_node_name
from fleetmedic.adapters.slurmcluster import SlurmCluster
from fleetmedic.adapters.slurmdoc import SlurmNodeDocs
from fleetmedic.errors import Cancelled, ConfigError
from fleetmedic.kinds import slurmdrain, slurmha, slurmreboot
from fleetmedic.model import keys
from fleetmedic.model.config import Config
from fleetmedic.model.config.safety import DrainConfig
from fleetmedic.model.nodestate import NodeView
from fleetmedic.model.slurmreason import format_reason, parse_reason
from fleetmedic.policy.history import parse_time
from fleetmedic.policy.inflight import InFlight

log = logging.getLogger(__name__)

REBOOT_TIMEOUT_FLOOR = 30.0
"""Seconds a resumed reboot through Slurm still gets when its timeout ran out while no
controller watched: enough to see the new boot that likely happened meanwhile."""


class SlurmctldCluster(SlurmCluster):
    """A Slurm cluster as the controller's Cluster (adapters/cluster.py)."""

    pods: Pods | None = None  # a Slurm node runs jobs, not pods

    def drain(
        self,
        node: str,
        settings: DrainConfig,
        *,
        timeout: float | None,
        force: bool,
        gpu_only: bool,
        cancel: threading.Event,
    ) -> Done:
        """The jobs, not pods (kinds/slurmdrain.py); ``gpu_only`` makes no difference (a
        job holds the whole node's allocation)."""
        done = slurmdrain.drain(
            self.slurm,
            node,
            settings,
            timeout=timeout or settings.timeout,
            force_blocked=force,
            cancel=cancel,
        )
        if done.cancelled and not done.complete:
            raise Cancelled(f"{node}: drain abandoned (stopping)")
        return Done(done.status, done.message)

    def settle(self, view: NodeView, cancel: threading.Event) -> float:
        return saved(view, cancel, self.wait_saved)

    def reboot(
        self,
        view: NodeView,
        *,
        via: str,
        why: str,
        timeout: float,
        requested_at: float,
        cancel: threading.Event,
    ) -> Done | None:
        """``scontrol reboot ASAP nextstate=down`` through the site's RebootProgram, and the
        wait for the new boot (kinds/slurmreboot.py), with ``ladder.reboot_via: slurm``.
        The request time is the in-flight record's (saved before this phase began:
        :meth:`settle`), so a resumed controller passes the same time and never asks
        twice."""
        if via != "slurm":
            return None
        slurm = self.slurm
        # the reason keeps the finding the node was fenced for (the record keeps the rest)
        fenced = parse_reason(slurmreboot.base_reason(slurm.node(view.name).reason), slurm.prefix)
        finding = fenced.finding if fenced else f"rebooting through Slurm ({why})"
        # a resumed phase gets what is left of its timeout (the request time is the first's)
        left = timeout - (time.time() - requested_at)
        done = slurmreboot.reboot(
            slurm,
            view.name,
            reason=format_reason("reboot", finding, slurm.prefix),
            timeout=max(REBOOT_TIMEOUT_FLOOR, left),
            requested_at=requested_at,
            cancel=cancel,
            boot_time=self.boot_time,
        )
        log.info("%s: reboot through Slurm: %s (%s)", view.name, done.status, done.message)
        if done.status == "cancelled":
            raise Cancelled(f"{view.name}: reboot through Slurm: {done.message}")
        return Done(done.status, done.message, "slurm reboot")


def saved(
    view: NodeView,
    cancel: threading.Event,
    wait_saved: Callable[[str, float, threading.Event], bool],
) -> float:
    """Wait until slurmctld has saved the in-flight record this phase started with, and
    return when it was written. slurmctld answers an update before it saves it (up to
    ~6 s later); a slurmctld crash in between would lose the record that says this phase
    ran, and the next controller would run it again (a second reboot). ``wait_saved`` is
    :meth:`SlurmCluster.wait_saved`: it reads what slurmctld saved where it can, and
    otherwise waits out the save window (adapters/slurmsave.py). The record's ``since`` is
    when it was written."""
    fl = InFlight.decode(view.annotations.get(keys.ANN_IN_FLIGHT))
    since = parse_time(fl.since) if fl else None
    written = since.timestamp() if since else time.time()
    if not wait_saved(view.name, written, cancel):
        raise Cancelled(f"{view.name}: stopping before the disruptive phase began")
    return written


class _Slurm:
    name = "slurm"
    server_title = ""  # (the adapter's server names slurmctld already)

    def connect(self, cfg: Config, kubeconfig: str | None) -> Cluster:
        """The Slurm cluster through its client tools, with the file store and events file
        under ``slurm.state_dir`` (model/config/slurm.py)."""
        if kubeconfig:
            raise ConfigError("--kubeconfig: this cluster is `kind: slurm` (no API server)")
        settings = cfg.slurm_settings()
        slurm = Slurm(settings.conf, prefix=settings.reason_prefix, timeout=settings.timeout)
        return SlurmctldCluster(
            slurm,
            cfg.vocabulary(),
            FileStore(settings.state_dir / "store"),
            partitions=settings.partitions,
            poll_interval=settings.poll_interval,
            events=settings.state_dir / "events.jsonl",
            state_save_location=settings.state_save_location,
        )

    def node_docs(
        self, side: Any, vocab: Any, named_by: str, one_node: bool, lasting: bool
    ) -> Callable[[], NodeDocs]:
        if one_node:
            check_node_name(side.node_name)
        s = side.slurm
        docs = slurmdoc.connect(
            s.conf,
            vocab,
            prefix=s.reason_prefix,
            timeout=s.timeout,
            read_every=s.read_every,
            cache_dir=s.cache_dir,
            node_read=s.node_read if lasting else "sinfo",  # (its child costs more than it saves)
        )
        return lambda: docs

    def preflight(self, cfg: Config) -> tuple[list[str], list[Path]]:
        slurm = cfg.slurm_settings()
        problems = []
        if slurm.conf is not None and not slurm.conf.is_file():
            problems.append(f"slurm.conf: {slurm.conf}: no such file")
        return problems, [slurm.state_dir]

    def prepare(self, cluster: Cluster, cfg: Config, identity: str) -> dict[str, Any]:
        """One acting controller across bastions (kinds/slurmha.py, docs/slurm.md)."""
        return slurmha.prepare(cfg, cluster, identity)

    def claims(self, side: Any) -> bool:
        return getattr(side, "slurm", None) is not None

    def answers(self, docs: NodeDocs) -> bool:
        return isinstance(docs, SlurmNodeDocs)


KIND = _Slurm()
