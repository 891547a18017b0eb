"""The controller's daemon runtime: ``serve`` (one loop, or one per cluster of
``clusters:``, the metrics server, the signals), the per-cluster retry loop, and the
start-up ``preflight``.

The ``run`` command itself is fleetmedic/service.py: it adds the detectors the controller
runs beside its loop, which live in the agent package. The commands an operator types
(status, plan, release, ...) are controller/commands.py and controller/manual.py.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import click

from fleetmedic import clikit, kinds, logcontext
from fleetmedic.backoff import Backoff
from fleetmedic.controller import sdnotify
from fleetmedic.errors import ConfigError, FleetmedicError
from fleetmedic.model.config import Config

if TYPE_CHECKING:  # (imported when the daemon starts, not for --help)
    from fleetmedic.adapters.cluster import Cluster
    from fleetmedic.controller.loop import Controller
    from fleetmedic.controller.metrics import Metrics


Sidecar = Callable[[threading.Event, Callable[[], bool]], None]
"""A detector run beside the loop (the Loki source), on a thread of its own, as
``sidecar(stop, acting)``: until ``stop``, changing the cluster only while ``acting()``
(:meth:`Controller.acting`; serve starts them)."""


def _setup_logging(level: str) -> None:
    journal = bool(os.environ.get("JOURNAL_STREAM"))  # journald adds its own timestamps
    fmt = (
        "%(levelname)s %(name)s: %(cluster_prefix)s%(message)s"
        if journal
        else "%(asctime)s %(levelname)s %(cluster_prefix)s%(message)s"
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(logcontext.ClusterPrefix())  # node names repeat across clusters
    logging.basicConfig(level=level.upper(), format=fmt, handlers=[handler])
    for noisy in ("kubernetes", "urllib3", "ansible_runner"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def serve(
    cfg: Config,
    kubeconfig: str | None,
    once: bool,
    dry_run: bool,
    log_level: str = "info",
    once_timeout: float = 30.0,
    sidecars: Callable[[Config, Cluster, Metrics], Sequence[Sidecar]] = lambda c, k, m: (),
) -> None:
    """Run the remediation controller until a signal (or, with ``once``, until done): one
    loop, or one per cluster of ``clusters:`` (each in a thread of its own).

    Before the first loop starts, each cluster's API server must answer: with ``once``
    within ``once_timeout`` seconds (else TemporaryError: exit 3, naming the server);
    without, it is waited for with capped back-off, one log line when it is found
    down and one when it answers (a cluster of several is retried by its own thread)."""
    from fleetmedic.controller import metrics as metricsmod
    from fleetmedic.controller.loop import Controller

    _setup_logging(log_level)
    dry_run = dry_run or cfg.dry_run
    members = [cfg.cluster(n) for n in cfg.cluster_names()] or [cfg]
    if kubeconfig and len(members) > 1:
        raise ConfigError(
            f"--kubeconfig names one cluster, but this config serves {len(members)} "
            f"({', '.join(cfg.cluster_names())}): add --cluster NAME"
        )
    for member in members:
        preflight(member, create=not dry_run)  # a dry run checks as much, creates nothing

    stop = threading.Event()
    # per cluster, made once: its metrics (what /metrics serves outlives a restarted
    # loop) and its sidecars, which act while the cluster's current loop leads
    metrics_of = {m.cluster_name: metricsmod.Metrics() for m in members}
    current: dict[str | None, Controller] = {}
    leading: dict[str | None, dict[str, Any]] = {}  # Leadership options per cluster

    def make(member: Config, cluster: Cluster | None = None) -> Controller:
        c = Controller(
            member,
            cluster or kinds.connect(member, kubeconfig),
            dry_run=dry_run,
            metrics=metrics_of[member.cluster_name],
            **leading.get(member.cluster_name, {}),
        )
        current[member.cluster_name] = c
        return c

    if once or not cfg.clusters:  # (before any loop exists: nothing to stop on failure)
        for member in members:
            reach(kinds.connect(member, kubeconfig), member, once_timeout if once else None)
    for member in members:
        cluster = kinds.connect(member, kubeconfig)
        if not dry_run:  # (the kind's start-up preparation: Slurm's store, pause and claim)
            leading[member.cluster_name] = _prepare(member, cluster)
        make(member, cluster)
    for member in members if not once else ():
        name = member.cluster_name
        for i, sidecar in enumerate(sidecars(member, current[name].cluster, metrics_of[name])):
            logcontext.thread(
                sidecar,
                args=(stop, lambda n=name: current[n].acting()),
                name=f"fleetmedic-sidecar-{name or 'main'}-{i}",
                cluster=name,
            ).start()
    if not once:
        try:
            if cfg.clusters:
                registries = {str(n): m.registry for n, m in metrics_of.items()}
                metricsmod.serve_clusters(registries, cfg.metrics.address, cfg.metrics.port)
            else:
                metrics_of[None].serve(cfg.metrics.address, cfg.metrics.port)
        except OSError as exc:
            raise ConfigError(
                f"metrics: cannot listen on {cfg.metrics.address}:"
                f"{cfg.metrics.port}: {exc.strerror or exc}"
            ) from None

    def on_signal(signum: int, _frame: Any) -> None:
        logging.getLogger(__name__).info("signal %d: stopping", signum)
        stop.set()
        for c in list(current.values()):
            c.wake()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    code = 0
    if not cfg.clusters:
        try:
            current[None].run(stop, once=once, sync_timeout=once_timeout if once else 60)
        except FleetmedicError as exc:
            click.echo(f"fleetmedic: error: {exc}", err=True)
            code = clikit.exit_code_of(exc)
    else:
        failed: list[str] = []
        threads = []
        for member in members:
            name = str(member.cluster_name)
            again = functools.partial(make, member)
            threads.append(
                logcontext.thread(
                    _run_cluster,
                    args=(name, current[member.cluster_name], again, stop, once, failed),
                    name=f"fleetmedic-cluster-{name}",
                    cluster=name,
                )
            )
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(1.0)  # (a bare join would not let the signal handler run)
        code = clikit.EXIT_UNREACHABLE if failed else 0  # (a cluster's loop could not run)
    logging.shutdown()
    # Worker threads still inside a drain cannot be interrupted; everything is recorded
    # on the Nodes, so leaving now is safe (the next start resumes the phase).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _prepare(cfg: Config, cluster: Cluster) -> dict[str, Any]:
    """The kind's start-up preparation; the Controller options its loop runs with (one
    identity for the kind's own claims and the leader Lease)."""
    from fleetmedic.controller.leadership import default_identity

    identity = cfg.leader_election.identity or default_identity()
    return {"identity": identity, **kinds.for_config(cfg).prepare(cluster, cfg, identity)}


CLUSTER_RETRY = 30.0  # seconds before a cluster whose loop failed is started again
CLUSTER_RETRY_CAP = 300.0  # doubling while it keeps failing, up to this


def _run_cluster(
    name: str,
    controller: Controller,
    make: Callable[[], Controller],
    stop: threading.Event,
    once: bool,
    failed: list[str],
) -> None:
    """One cluster's loop. A failure (its API server down at start, a profile conflict) is
    logged and retried with capped exponential back-off, and never stops the other
    clusters' loops. The same failure again is not logged again: one line per change."""
    log = logging.getLogger(__name__)
    backoff = Backoff(CLUSTER_RETRY, CLUSTER_RETRY_CAP)
    while not stop.is_set():
        try:
            controller.run(stop, once=once)
            return
        except FleetmedicError as exc:
            if once:
                log.error("cluster %s: %s", name, exc)
                failed.append(name)
                return
            delay, news = backoff.failed(str(exc))
            if news:
                log.error(
                    "cluster %s: %s; starting again in %.0fs (then backing off up to every "
                    "%.0fs while it fails this way)",
                    name,
                    exc,
                    delay,
                    CLUSTER_RETRY_CAP,
                )
        if stop.wait(delay):
            return
        controller = make()  # (a stopped loop's worker pool is gone: a fresh one)


def reach(cluster: Cluster, cfg: Config, timeout: float | None) -> None:
    """Wait until the cluster's API server answers one small list (which also checks
    kube.label_selector there). ``timeout`` None: as long as it takes."""
    clikit.wait_reachable(
        lambda: next(iter(cluster.list_node_pages(cfg.kube.label_selector, page_size=1))),
        timeout,
        log=logging.getLogger(__name__),
        on_retry=_still_starting,
    )


def _still_starting(wait: float) -> None:
    """Under systemd (Type=notify, TimeoutStartSec), a start that waits for the API server
    asks for more time before each wait, or systemd would kill it as a hung start."""
    sdnotify.notify(
        f"EXTEND_TIMEOUT_USEC={int((wait + 60) * 1_000_000)}\n"
        "STATUS=waiting for the API server (see the log)"
    )


def preflight(cfg: Config, create: bool = True) -> None:
    """What must be readable before the first repair: files, secrets, run directories.
    One ConfigError listing every problem."""
    problems = preflight_problems(cfg, create)
    missing = [p.removeprefix("missing file: ") for p in problems if p.startswith("missing")]
    rest = [p for p in problems if not p.startswith("missing")]
    if problems:
        said = [f"missing files: {'; '.join(missing)}"] if missing else []
        raise ConfigError("; ".join(said + rest))


def preflight_problems(cfg: Config, create: bool = True) -> list[str]:
    """Every start-up problem, one line each (``fleetmedic config check`` prints them):
    missing files (playbooks of every rung, the SSH key, the kubeconfig, BMC files,
    secrets), unreadable secrets, a signing key others can read, run directories that
    cannot be made. ``create`` False (a dry run, the config check): the directories
    are only checked, not made."""
    from fleetmedic.adapters import chat, notify, receptor_direct

    problems = [f"missing file: {m}" for m in cfg.missing_files()]
    checks: list[Callable[[], object]] = []
    if cfg.smtp:
        smtp = cfg.smtp
        checks.append(lambda: notify.read_password(smtp))  # unreadable secrets: now, not at 3 am
    for name in cfg.profile_names():
        for target in cfg.profile(name).notify.targets:
            checks.append(functools.partial(chat.read_url, target))  # so do chat URLs
        mesh = cfg.profile(name).executor.receptor
        if mesh and mesh.signing_key:
            checks.append(functools.partial(receptor_direct.check_key, mesh.signing_key))
    for check in checks:
        try:
            check()
        except ConfigError as exc:
            if "No such file" not in str(exc):  # (missing_files said so already)
                problems.append(str(exc))
    dirs = [cfg.ansible.run_dir, cfg.ansible.evidence_dir]
    kind_problems, kind_dirs = kinds.for_config(cfg).preflight(cfg)  # (slurm.conf, its store)
    problems += kind_problems
    dirs += kind_dirs
    for d in dirs:
        if create:
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                problems.append(f"cannot create {d}: {exc.strerror}")
            continue
        up = clikit.uncreatable(d)
        if up is not None:
            problems.append(f"cannot create {d}: {up} is not a writable directory")
    return problems
