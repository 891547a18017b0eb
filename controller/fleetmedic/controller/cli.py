"""The controller's commands: ``fleetmedic run | status | plan | release | reset | breaker``.

Every command takes ``--config`` (default /etc/fleetmedic/controller.yaml; when that
default does not exist the built-in defaults apply) and ``--kubeconfig`` (wins over the
config's ``kube.kubeconfig``). Any :class:`~fleetmedic.errors.FleetmedicError` ends the
command with one line, ``fleetmedic: error: ...``, and exit status 1.

- ``run``: the controller (``--once``: until a cycle admits nothing and no work is under
  way, then exit; ``--dry-run``: decide and log, change nothing).
- ``status [--json] [--all]``: nodes by state, since when, what is under way, attempts
  in the current episode, last finding. Healthy nodes only with ``--all``.
- ``plan [--json]``: what the next cycle would do and what the safety gate would hold.
  Reads only.
- ``release NODE``: a human returns a ``manual`` node to service (``--force`` for a node
  the controller is still working on).
- ``quarantine NODE [--dry-run]``: deep diagnostics and a recommendation before the node
  returns to service (a node in service is fenced at its ladder's first rung for it).
- ``reset [--yes]``: remove every fleetmedic taint (exact key, value and effect: only
  ours), our records and our own cordons, from every node.
- ``breaker status [--json]`` / ``breaker reset [--yes]``: the circuit breaker as recorded
  on the pause ConfigMap; a reset lets the running controller resume.
"""

from __future__ import annotations

import dataclasses
import functools
import getpass
import json
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from fleetmedic import logcontext
from fleetmedic.errors import ConfigError, FleetmedicError, NotFoundError
from fleetmedic.model import config as configmod
from fleetmedic.model import keys
from fleetmedic.model.config import Config
from fleetmedic.model.nodestate import NodeView
from fleetmedic.model.nodestate import view as view_of

if TYPE_CHECKING:  # (the commands import the client and the loop only when they run)
    from fleetmedic.adapters.kube import Kube
    from fleetmedic.controller.loop import Controller, Sidecar
    from fleetmedic.controller.metrics import Metrics
    from fleetmedic.policy.profiles import Assignment

DEFAULT_CONFIG = Path("/etc/fleetmedic/controller.yaml")


# -- plumbing ---------------------------------------------------------------------------
def _common(fn: Callable[..., None]) -> Callable[..., None]:
    """--config/--kubeconfig, and FleetmedicError as one line with a non-zero exit."""

    @click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help=f"Controller config (default {DEFAULT_CONFIG}).",
    )
    @click.option(
        "--kubeconfig",
        type=click.Path(dir_okay=False),
        default=None,
        help="kubeconfig file; wins over the config's kube.kubeconfig.",
    )
    @click.option(
        "--cluster",
        metavar="NAME",
        default=None,
        help="With `clusters:` in the config: the cluster to act on"
        + (" (default: every one)." if getattr(fn, "all_clusters", False) else "."),
    )
    @functools.wraps(fn)
    def wrapper(
        config_path: Path | None, kubeconfig: str | None, cluster: str | None, **kwargs: Any
    ) -> None:
        try:
            every = getattr(fn, "all_clusters", False)
            cfg = pick_cluster(load_config(config_path), cluster, every)
            fn(cfg=cfg, kubeconfig=kubeconfig, **kwargs)
        except FleetmedicError as exc:
            click.echo(f"fleetmedic: error: {exc}", err=True)
            sys.exit(1)

    return wrapper


def all_clusters(fn: Callable[..., None]) -> Callable[..., None]:
    """Mark a command that serves every cluster of `clusters:` when --cluster is not given
    (it gets the whole config); the others get one cluster's effective config."""
    fn.all_clusters = True  # type: ignore[attr-defined]
    return fn


def pick_cluster(cfg: Config, name: str | None, every: bool) -> Config:
    if name:
        if not cfg.clusters:
            raise ConfigError("--cluster: this config serves one cluster (it has no `clusters:`)")
        return cfg.cluster(name)
    if not cfg.clusters or every:
        return cfg
    if len(cfg.clusters) == 1:
        return cfg.cluster(cfg.clusters[0].name)
    raise ConfigError(
        f"this config serves {len(cfg.clusters)} clusters "
        f"({', '.join(cfg.cluster_names())}): name one with --cluster"
    )


def load_config(path: Path | None) -> Config:
    if path is None:
        return configmod.load(DEFAULT_CONFIG) if DEFAULT_CONFIG.exists() else configmod.parse({})
    return configmod.load(path)


def connect(cfg: Config, kubeconfig: str | None):
    from fleetmedic.adapters.kube import connect as kube_connect

    if kubeconfig:
        return kube_connect(kubeconfig, cfg.kube.context)
    path = configmod.secret_path(cfg.kube.kubeconfig, cfg.kube.kubeconfig_credential)
    if (
        path is None
        and os.environ.get("KUBERNETES_SERVICE_HOST")
        and not os.environ.get("KUBECONFIG")
    ):
        return kube_connect(in_cluster=True)
    return kube_connect(str(path) if path else None, cfg.kube.context)


def now() -> datetime:
    return datetime.now(UTC)


def views(kube, cfg: Config) -> list[NodeView]:
    nodes, _ = kube.list_nodes(cfg.kube.label_selector)
    return sorted(
        (view_of(n, cfg.vocabulary(), cfg.foreign()) for n in nodes), key=lambda v: v.name
    )


def operator() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def _setup_logging(verbose: bool) -> None:
    journal = bool(os.environ.get("JOURNAL_STREAM"))  # journald adds its own timestamps
    fmt = (
        "%(levelname)s %(name)s: %(cluster_prefix)s%(message)s"
        if journal
        else "%(asctime)s %(levelname)s %(cluster_prefix)s%(message)s"
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(logcontext.ClusterPrefix())  # node names repeat across clusters
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format=fmt, handlers=[handler]
    )
    for noisy in ("kubernetes", "urllib3", "ansible_runner"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


# -- run ------------------------------------------------------------------------------
# (the `run` command itself is fleetmedic/service.py: it adds the detectors the controller
# runs beside its loop, which live in the agent package)
def serve(
    cfg: Config,
    kubeconfig: str | None,
    once: bool,
    dry_run: bool,
    verbose: bool,
    sidecars: Callable[[Config, Kube, Metrics], Sequence[Sidecar]] = lambda c, k, m: (),
) -> None:
    """Run the remediation controller until a signal (or, with ``once``, until done): one
    loop, or one per cluster of ``clusters:`` (each in a thread of its own)."""
    from fleetmedic.controller import metrics as metricsmod
    from fleetmedic.controller.loop import Controller

    _setup_logging(verbose)
    dry_run = dry_run or cfg.dry_run
    members = [cfg.cluster(n) for n in cfg.cluster_names()] or [cfg]
    if kubeconfig and len(members) > 1:
        raise ConfigError(
            f"--kubeconfig names one cluster, but this config serves {len(members)} "
            f"({', '.join(cfg.cluster_names())}): add --cluster NAME"
        )
    if not dry_run:
        for member in members:
            _preflight(member)

    stop = threading.Event()
    # per cluster, made once: its metrics (what /metrics serves outlives a restarted
    # loop) and its sidecars, which act while the cluster's current loop leads
    metrics_of = {m.cluster_name: metricsmod.Metrics() for m in members}
    current: dict[str | None, Controller] = {}

    def make(member: Config) -> Controller:
        c = Controller(
            member,
            connect(member, kubeconfig),
            dry_run=dry_run,
            metrics=metrics_of[member.cluster_name],
        )
        current[member.cluster_name] = c
        return c

    for member in members:
        make(member)
    for member in members if not once else ():
        name = member.cluster_name
        for i, sidecar in enumerate(sidecars(member, current[name].kube, metrics_of[name])):
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
            current[None].run(stop, once=once)
        except FleetmedicError as exc:
            click.echo(f"fleetmedic: error: {exc}", err=True)
            code = 1
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
        code = 1 if failed else 0
    logging.shutdown()
    # Worker threads still inside a drain cannot be interrupted; everything is recorded
    # on the Nodes, so leaving now is safe (the next start resumes the phase).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


CLUSTER_RETRY = 30.0  # seconds before a cluster whose loop failed is started again


def _run_cluster(
    name: str,
    controller: Controller,
    make: Callable[[], Controller],
    stop: threading.Event,
    once: bool,
    failed: list[str],
) -> None:
    """One cluster's loop. A failure (its API server down at start, a profile conflict) is
    logged and retried, and never stops the other clusters' loops."""
    log = logging.getLogger(__name__)
    while not stop.is_set():
        try:
            controller.run(stop, once=once)
            return
        except FleetmedicError as exc:
            log.error("cluster %s: %s", name, exc)
            if once:
                failed.append(name)
                return
            log.info("cluster %s: starting again in %.0fs", name, CLUSTER_RETRY)
        if stop.wait(CLUSTER_RETRY):
            return
        controller = make()  # (a stopped loop's worker pool is gone: a fresh one)


def _preflight(cfg: Config) -> None:
    """What must be readable before the first repair: files, secrets, run directories."""
    from fleetmedic.adapters import chat, notify, receptor_direct

    missing = cfg.missing_files()
    if missing:
        raise ConfigError(f"missing files: {'; '.join(missing)}")
    if cfg.smtp:
        notify.read_password(cfg.smtp)  # unreadable secrets fail now, not at 3 am
    for name in cfg.profile_names():
        for target in cfg.profile(name).notify.targets:
            chat.read_url(target)  # so do chat URLs
        mesh = cfg.profile(name).executor.receptor
        if mesh and mesh.signing_key:
            receptor_direct.check_key(mesh.signing_key)  # and a world-readable key
    for d in (cfg.ansible.run_dir, cfg.ansible.evidence_dir):
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create {d}: {exc.strerror}") from None


# -- status ---------------------------------------------------------------------------
@click.command("status")
@_common
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--all", "show_all", is_flag=True, help="Include healthy nodes.")
@all_clusters
def status(cfg: Config, kubeconfig: str | None, as_json: bool, show_all: bool) -> None:
    """Show nodes by repair state (with `clusters:`, grouped by cluster).

    A cluster whose API server does not answer is one line on stderr; the others are
    still shown, and the exit status is then 1.
    """
    from fleetmedic.controller.status import render_status

    if cfg.clusters and kubeconfig:
        raise ConfigError("--kubeconfig names one cluster: add --cluster NAME")
    members = [cfg.cluster(n) for n in cfg.cluster_names()] or [cfg]
    tables: list[tuple[str | None, list[dict[str, Any]]]] = []
    failed = []
    for member in members:
        try:
            tables.append((member.cluster_name, _status_rows(member, kubeconfig)))
        except FleetmedicError as exc:
            if not cfg.clusters:
                raise
            failed.append(member.cluster_name)
            click.echo(f"fleetmedic: error: cluster {member.cluster_name}: {exc}", err=True)
    if as_json:
        rows = [{"cluster": name, **r} if name else r for name, t in tables for r in t]
        click.echo(json.dumps(rows, indent=2))
    else:
        for name, rows in tables:
            shown = [
                r
                for r in rows
                if show_all
                or r["state"] != "healthy"
                or r["slow_network"]
                or r["foreign_signals"]
                or r["doing"]
            ]
            if name:
                click.echo(f"== cluster {name} ==")
            click.echo(
                render_status(
                    shown, hidden=len(rows) - len(shown), width=max(80, _terminal_width())
                )
            )
    if failed:
        sys.exit(1)


def _status_rows(cfg: Config, kubeconfig: str | None) -> list[dict[str, Any]]:
    from fleetmedic.controller.status import STATE_ORDER, node_status
    from fleetmedic.policy.profiles import assign

    at = now()
    vs = views(connect(cfg, kubeconfig), cfg)
    profile_of = assign(vs, cfg).profile_of
    rows = [node_status(v, at, profile_of.get(v.name, "(conflict)")) for v in vs]
    rows.sort(
        key=lambda r: (STATE_ORDER[r["state"]], not r["slow_network"], r["since"] or "", r["name"])
    )
    return rows


def _terminal_width() -> int:
    return os.get_terminal_size().columns if sys.stdout.isatty() else 250


# -- plan -----------------------------------------------------------------------------
@click.command("plan")
@_common
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def plan(cfg: Config, kubeconfig: str | None, as_json: bool) -> None:
    """Show what the next cycle would do, changing nothing: each fenced node's next repair
    action (or why it is held), and with `sweep:` the idle nodes a diagnostic sweep would
    start on, the sweeps under way, and why a pool's sweeps are held."""
    from fleetmedic.controller.switches import Switches, read_switches
    from fleetmedic.policy import breaker as breakermod
    from fleetmedic.policy.actions import Kind
    from fleetmedic.policy.plan import actionable, decide_all, make_plan
    from fleetmedic.policy.profiles import assign

    at = now()
    kube = connect(cfg, kubeconfig)
    vs = views(kube, cfg)
    assignment = assign(vs, cfg)
    conflict = assignment.error()
    if conflict:
        raise ConfigError(f"profiles: {conflict}")
    decisions = decide_all(vs, at, cfg, assignment=assignment)
    wanted = actionable(decisions) or bool(cfg.sweeps())
    switches = read_switches(kube, cfg) if wanted else Switches()
    breaker_reason = {
        name: breakermod.reason(breakermod.resume(switches.breaker_of(name)))
        for name in cfg.profile_names()
    }
    p = make_plan(
        vs,
        decisions,
        at,
        cfg,
        paused=switches.paused,
        breaker_reason=breaker_reason,
        assignment=assignment,
    )
    held = {a.node: why for a, why in p.admission.held}
    admitted = {a.node for a in p.admission.admitted}
    items: list[dict[str, Any]] = []
    for _, a in p.decisions:
        if a.kind == Kind.NONE and a.reason == "healthy":
            continue
        verdict = "do" if a.node in admitted else "held" if a.node in held else a.kind
        items.append(
            {
                "node": a.node,
                "profile": a.profile,
                "action": a.kind,
                "step": a.step,
                "phase": a.phase,
                "reason": a.reason,
                "verdict": verdict,
                "held_because": held.get(a.node),
                "not_before": a.not_before.isoformat() if a.not_before else None,
                "playbook": a.playbook,
            }
        )
    if cfg.sweeps():
        items += _sweep_items(
            kube, cfg, vs, at, assignment, admitted, switches.paused, breaker_reason
        )
    if as_json:
        click.echo(json.dumps(items, indent=2))
        return
    for i in items:
        what = i["action"] + (f" {i['phase']}" if i["phase"] else "")
        tail = {"do": "", "held": f"  [held: {i['held_because']}]"}.get(i["verdict"], "")
        if i["verdict"] == "wait" and i["not_before"]:
            tail = f"  [not before {i['not_before']}]"
        if i["node"] is None:  # a pool's sweeps, held as a whole
            click.echo(f"sweeps of profile {i['profile']}: held: {i['held_because']}")
            continue
        click.echo(f"{i['node']}: {what} ({i['step'] or '-'}): {i['reason']}{tail}")
    slots = len(p.fleet.active)
    sweeps = sum(1 for i in items if i["action"] == "sweep" and i["verdict"] == "do")
    click.echo(
        f"{len(admitted)} action(s) would run now, {len(held)} held; "
        + (f"{sweeps} sweep(s) would start; " if cfg.sweeps() else "")
        + f"{slots} node(s) hold repair slots; {len(vs)} nodes in the pool"
    )


def _sweep_items(
    kube: Kube,
    cfg: Config,
    vs: list[NodeView],
    at: datetime,
    assignment: Assignment,
    admitted: set[str],
    paused: str | None,
    breakers: dict[str, str | None],
) -> list[dict[str, Any]]:
    """The sweeps the controller's next cycle would start, those under way (a node under
    the maintenance taint: a controller's sweep, which this command cannot tell from an
    orphan), and each pool whose sweeps are held, in `plan`'s item shape."""
    from fleetmedic.controller.podwatch import gpu_nodes_now
    from fleetmedic.policy import sweep

    running = sorted(v.name for v in vs if v.maintenance)
    sp = sweep.plan(
        vs,
        at,
        cfg,
        assignment,
        gpu_busy=gpu_nodes_now(kube),
        sweeping=running,
        skip=admitted,
        paused=paused,
        breakers=breakers,
    )
    by_name = {v.name: v for v in vs}

    def item(
        node: str | None, profile: str, verdict: str, reason: str, held: str | None = None
    ) -> dict[str, Any]:
        sw = cfg.profile(profile).sweep
        return {
            "node": node,
            "profile": profile,
            "action": "sweep",
            "step": None,
            "phase": f"level {sw.level}" if sw else None,
            "reason": reason,
            "verdict": verdict,
            "held_because": held,
            "not_before": None,
            "playbook": "sweep.yml",
        }

    def last(name: str) -> str:
        swept = sweep.LastSweep.of(by_name[name])
        return f"last swept {swept.at} ({swept.result})" if swept else "never swept"

    out = [item(n, prof, "do", f"idle, {last(n)}") for n, prof in sp.start]
    for name in running:
        prof = assignment.profile_of.get(name)
        if prof is not None:
            out.append(item(name, prof, "running", "under the maintenance taint"))
    out += [item(None, prof, "held", "", why) for prof, why in sorted(sp.held.items())]
    return out


# -- history --------------------------------------------------------------------------
@click.command("history")
@_common
@click.argument("node")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option("--limit", type=int, default=0, help="Only the newest N entries (0: all).")
def history(cfg: Config, kubeconfig: str | None, node: str, as_json: bool, limit: int) -> None:
    """A node's whole history, newest first: every repair attempt (its history annotation)
    and every Event about it (fleetmedic's actions, the agent's fences, others')."""
    from fleetmedic.controller.timeline import render, timeline

    kube = connect(cfg, kubeconfig)
    try:
        obj = kube.get_node(node)
    except NotFoundError:
        raise NotFoundError(f"node {node} not found") from None
    rows = timeline(obj, kube.list_node_events(node))
    if limit > 0:
        rows = rows[:limit]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(render(rows, width=max(80, _terminal_width())))


# -- release and reset ----------------------------------------------------------------
@click.command("release")
@_common
@click.argument("node")
@click.option("--force", is_flag=True, help="Also release a node still in reboot or reimage.")
def release(cfg: Config, kubeconfig: str | None, node: str, force: bool) -> None:
    """Return a node in manual repair to service."""
    from fleetmedic.policy import release as releasemod

    kube = connect(cfg, kubeconfig)
    try:
        v = view_of(kube.get_node(node), cfg.vocabulary(), cfg.foreign())
    except NotFoundError:
        raise NotFoundError(f"node {node} not found") from None
    if v.state == "healthy":
        raise FleetmedicError(f"node {node} is not in repair (no fleetmedic repair taint)")
    if v.state != "manual" and not force:
        raise FleetmedicError(
            f"node {node} is in {v.state}, which the controller is still "
            "working on; use --force to release it anyway"
        )
    from fleetmedic.controller import audit, conditions

    upd = releasemod.release(v, now(), cfg, by=operator())
    written = kube.update_node(node, upd.apply_for(cfg.vocabulary()))
    for ev in upd.events:
        kube.post_event(written, ev.reason, ev.message, ev.type)
    conditions.publish(kube, view_of(written, cfg.vocabulary(), cfg.foreign()))
    audit.record(operator(), node, "release", f"{v.state} -> healthy by hand", "written")
    click.echo(f"{node}: {v.state} -> healthy (released by {operator()})")
    from fleetmedic.adapters import chat
    from fleetmedic.controller.chatter import deliver_now

    back = chat.repaired(node, f"released by {operator()} ({v.state} -> healthy)")
    for line in deliver_now(cfg, v, back):
        click.echo(f"fleetmedic: warning: {line}", err=True)


@click.command("quarantine")
@_common
@click.argument("node")
@click.option("--dry-run", is_flag=True, help="Say what it would do; change nothing.")
def quarantine(cfg: Config, kubeconfig: str | None, node: str, dry_run: bool) -> None:
    """Run deep diagnostics on a node before it returns to service (the quarantine rung).

    The controller runs `ladder.quarantine.playbook` (level `ladder.quarantine.level`
    diagnostics and the fabric checks) when the node's repair passes, and records its
    recommendation (return-to-service or replace) in the fleetmedic.io/quarantine
    annotation. A node in service is fenced at its ladder's first rung first.
    """
    from fleetmedic.policy import quarantine as qmod
    from fleetmedic.policy.history import stamp
    from fleetmedic.policy.profiles import assign

    kube = connect(cfg, kubeconfig)
    try:
        v = view_of(kube.get_node(node), cfg.vocabulary(), cfg.foreign())
    except NotFoundError:
        raise NotFoundError(f"node {node} not found") from None
    profile = assign([v], cfg).profile_of.get(v.name)
    if profile is None:
        raise FleetmedicError(f"node {node} matches no single profile: see `fleetmedic status`")
    by = operator()
    try:
        upd, what = qmod.ask(v, cfg.profile(profile), by, stamp(now()))
    except ValueError as exc:
        raise FleetmedicError(f"node {node} cannot be quarantined: {exc}") from None
    if dry_run:
        click.echo(f"{node}: would ask for a quarantine ({what}); nothing changed")
        return
    from fleetmedic.controller import audit, conditions

    written = kube.update_node(node, upd.apply_for(cfg.vocabulary()))
    for ev in upd.events:
        kube.post_event(written, ev.reason, ev.message, ev.type)
    conditions.publish(kube, view_of(written, cfg.vocabulary(), cfg.foreign()))
    audit.record(by, node, "quarantine", what, "written")
    click.echo(f"{node}: quarantine requested by {by} ({what})")


@click.command("reset")
@_common
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def reset(cfg: Config, kubeconfig: str | None, yes: bool) -> None:
    """Remove every fleetmedic taint (only ours)."""
    from fleetmedic.policy import release as releasemod

    kube = connect(cfg, kubeconfig)
    vocab = cfg.vocabulary()
    ours = (keys.ANN_IN_FLIGHT, keys.ANN_ESCALATED, keys.ANN_CORDONED, keys.ANN_QUARANTINE_REQUEST)
    todo = [
        v
        for v in views(kube, cfg)
        if any(vocab.is_ours(t) for t in v.taints) or any(k in v.annotations for k in ours)
    ]
    if not todo:
        click.echo("no node carries a fleetmedic taint")
        return
    names = ", ".join(v.name for v in todo[:10]) + (" ..." if len(todo) > 10 else "")
    if not yes:
        click.confirm(
            f"Remove fleetmedic taints from {len(todo)} node(s) ({names})?", abort=True, err=True
        )
    from fleetmedic.controller import audit, conditions

    by = operator()
    for v in todo:
        upd = releasemod.reset(v, now(), cfg, by=by)
        written = kube.update_node(v.name, upd.apply_for(vocab))
        for ev in upd.events:
            kube.post_event(written, ev.reason, ev.message, ev.type)
        conditions.publish(kube, view_of(written, vocab, cfg.foreign()))
        audit.record(by, v.name, "reset", "every fleetmedic taint removed by hand", "written")
    click.echo(f"removed fleetmedic taints from {len(todo)} node(s): {names}")


# -- breaker --------------------------------------------------------------------------
@click.group("breaker")
def breaker() -> None:
    """Show or reset the circuit breaker.

    When more than safety.breaker.threshold_percent of the pool turns unhealthy within
    safety.breaker.window, the controller stops every repair and sends one storm email.
    It records the trip on the pause ConfigMap (safety.pause_configmap), so the breaker
    stays open across restarts and leader changes until it is reset here (or its
    cooldown passes). After a reset the storm's nodes are not replayed as new turns.
    """


def _breaker_data(cfg: Config, kube) -> tuple[tuple[str, str], dict[str, str]]:
    from fleetmedic.controller.switches import pause_configmap

    ref = pause_configmap(cfg)
    if ref is None:
        raise ConfigError(
            "safety.pause_configmap is empty, so the breaker lives only in the "
            "controller's memory (restart the controller to reset it)"
        )
    cm = kube.get_config_map(*ref)
    if cm is None:
        raise NotFoundError(
            f"ConfigMap {cfg.safety.pause_configmap} not found (ship "
            "deploy/controller/configmap.yaml); without it the breaker lives "
            "only in the controller's memory"
        )
    return ref, cm.get("data") or {}


def _profiles_named(cfg: Config, profile: str | None) -> tuple[str, ...]:
    if profile is None:
        return cfg.profile_names()
    try:
        cfg.profile(profile)
    except ValueError as exc:
        raise ConfigError(f"--profile: {exc}") from None
    return (profile,)


_PROFILE_OPTION = click.option(
    "--profile",
    metavar="NAME",
    default=None,
    help="The profile whose breaker to show or reset (each profile has its own; "
    "default: every profile for status, `default` for reset).",
)


@breaker.command("status")
@_common
@_PROFILE_OPTION
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print JSON instead of text (a list, one object per profile, when several are shown).",
)
def breaker_status(cfg: Config, kubeconfig: str | None, profile: str | None, as_json: bool) -> None:
    """Say whether the circuit breaker is open, since when and for which nodes."""
    from fleetmedic.policy import breaker as breakermod

    names = _profiles_named(cfg, profile)
    _, data = _breaker_data(cfg, connect(cfg, kubeconfig))
    records = {n: breakermod.Record.decode(data.get(breakermod.record_key(n))) for n in names}
    if as_json:
        shown = [
            {
                "profile": n,
                "open": bool(r and r.open),
                **(dataclasses.asdict(r) if r else {}),
            }
            for n, r in records.items()
        ]
        click.echo(json.dumps(shown[0] if len(shown) == 1 else shown, indent=2))
        return
    for n, record in records.items():
        whose = "" if n == "default" and len(names) == 1 else f" of profile {n}"
        flag = "" if n == "default" else f" --profile {n}"
        if record is None or not record.open:
            reset = (
                f" (last reset {record.reset_at} by {record.reset_by})"
                if record and record.reset_at
                else ""
            )
            click.echo(f"circuit breaker{whose} closed{reset}")
            continue
        shown_nodes = ", ".join(record.nodes[:10]) + (" ..." if len(record.nodes) > 10 else "")
        click.echo(
            f"circuit breaker{whose} OPEN since {record.tripped_at}: no repair starts until "
            f"`fleetmedic breaker reset{flag}`\n{len(record.nodes)} node(s) turned unhealthy: "
            f"{shown_nodes}"
        )


@breaker.command("reset")
@_common
@_PROFILE_OPTION
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def breaker_reset(cfg: Config, kubeconfig: str | None, profile: str | None, yes: bool) -> None:
    """Close a circuit breaker: the controller resumes that profile's repairs within seconds."""
    from fleetmedic.policy import breaker as breakermod

    [name] = _profiles_named(cfg, profile or "default")
    whose = "" if name == "default" else f" of profile {name}"
    kube = connect(cfg, kubeconfig)
    ref, data = _breaker_data(cfg, kube)
    key = breakermod.record_key(name)
    record = breakermod.Record.decode(data.get(key))
    if record is None or not record.open:
        click.echo(f"circuit breaker{whose} is closed; nothing to reset")
        return
    if not yes:
        click.confirm(
            f"Reset the circuit breaker{whose} open since {record.tripped_at} "
            f"({len(record.nodes)} node(s))? Repairs resume at once.",
            abort=True,
            err=True,
        )
    by = operator()
    kube.patch_config_map_data(*ref, {key: breakermod.closed_by(record, now(), by).encode()})
    click.echo(f"circuit breaker{whose} reset by {by}; the controller resumes within a few seconds")
