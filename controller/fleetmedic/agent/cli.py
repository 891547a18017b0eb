"""``fleetmedic agent``: the node agent's command line."""

from __future__ import annotations

import dataclasses
import json
import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click

from fleetmedic import clikit
from fleetmedic.adapters.nodedocs import NodeDocs
from fleetmedic.checks.options import probe_options
from fleetmedic.errors import ConfigError, FleetmedicError

DEFAULT_CONFIG = Path("/etc/fleetmedic/agent.yaml")


def _merge(cfg, opts: dict[str, Any]):
    """Flags over the config file (a flag that was not given changes nothing)."""
    from fleetmedic.agent.config import AgentConfig, SlurmAgentConfig

    kernel = dataclasses.replace(
        cfg.kernel,
        **{
            k: v
            for k, v in {
                "source": opts["kernel_log"],
                "poll": opts["kernel_poll"],
                "boot_id_file": opts["boot_id_file"],
            }.items()
            if v is not None
        },
    )
    fabric = cfg.fabricmanager
    if opts.get("fabricmanager_log") is not None:
        fabric = dataclasses.replace(fabric, source=opts["fabricmanager_log"])
    net = cfg.checks.network
    net = dataclasses.replace(
        net,
        **{
            k: v
            for k, v in {
                "peers": tuple(opts["peers"]) or None,
                "min_mbps": opts["min_mbps"],
                "duration": opts["network_duration"],
            }.items()
            if v is not None
        },
    )
    checks = dataclasses.replace(
        cfg.checks,
        network=net,
        **{
            k: v
            for k, v in {
                "vendor": opts["vendor"],
                "expected_gpus": opts["expected_gpus"],
                "timeout": opts["timeout"],
            }.items()
            if v is not None
        },
    )
    slurm = cfg.slurm
    given = {
        "conf": opts.get("slurm_conf"),
        "reason_prefix": opts.get("slurm_reason_prefix"),
        "cache_dir": opts.get("slurm_cache_dir"),
    }
    if any(v is not None for v in given.values()):
        slurm = dataclasses.replace(
            slurm or SlurmAgentConfig(),
            **{k: v for k, v in given.items() if v is not None},
        )
    merged: AgentConfig = cfg.replace(
        node_name=opts["node_name"],
        interval=opts["interval"],
        strike_limit=opts["strike_limit"],
        taints=opts["taints"],
        kubeconfig=opts["kubeconfig"],
        retry_cap=opts["retry_cap"],
        alive_file=opts["alive_file"],
        metrics_port=opts["metrics_port"],
        events=False if opts["no_events"] else None,
    )
    return dataclasses.replace(
        merged, kernel=kernel, fabricmanager=fabric, checks=checks, slurm=slurm
    )


def _connect(cfg, opts: dict[str, Any], lasting: bool) -> tuple[NodeDocs, NodeDocs]:
    """Where the agent writes, through its node's kind (fleetmedic/kinds/): one writer for
    the check rounds and one for the kernel log's thread (a kind may hand both the same
    adapter, to serialize their writes). ``lasting``: the daemon, not ``--once``."""
    from fleetmedic import kinds

    named_by = "--kubeconfig" if opts["kubeconfig"] else "kubeconfig in the config"
    make = kinds.node_docs(cfg, cfg.vocabulary(), named_by, lasting=lasting)
    return make(), make()


def _logging(level: str) -> None:
    logging.Formatter.converter = time.gmtime
    logging.basicConfig(
        level=level.upper(),  # (a clikit.LOG_LEVELS choice: checked by click)
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(message)s",
        datefmt="%Y-%m-%dT%H:%M:%SZ",
    )
    for noisy in ("kubernetes", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@click.command(
    "agent",
    epilog=clikit.epilog(
        "fleetmedic agent --node-name gpu-node-7 --interval 1m",
        "fleetmedic agent --node-name gpu-node-7 --once --once-timeout 10s",
        "fleetmedic agent --node-name n7 --slurm-conf /etc/slurm/slurm.conf",
        codes=(0, 2, 3, 4),
    ),
)
@click.option(
    "--node-name",
    envvar="NODE_NAME",
    metavar="NODE",
    help="This node's Kubernetes Node name (or Slurm node name with --slurm-conf); the only "
    "node the agent reads or writes. Env NODE_NAME (the DaemonSet sets it from spec.nodeName).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="FLEETMEDIC_AGENT_CONFIG",
    default=DEFAULT_CONFIG,
    show_default=True,
    help="YAML settings (see fleetmedic.agent.config); flags below override it. "
    "A missing default file is fine.",
)
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False),
    default=None,
    show_default="the Pod's ServiceAccount in a cluster, else $KUBECONFIG or ~/.kube/config",
    help="Kubeconfig to use (the one cluster whose Node it writes).",
)
@click.option(
    "--slurm-conf",
    type=click.Path(dir_okay=False),
    default=None,
    help="This is a Slurm node: fence it through scontrol with this slurm.conf (a drain "
    "with our reason, the record in the node's Extra) instead of the Kubernetes API.",
)
@click.option(
    "--slurm-reason-prefix",
    default=None,
    metavar="PREFIX",
    show_default="fleetmedic:",
    help="With Slurm: the drain reason prefix we own (must match the controller's).",
)
@click.option(
    "--slurm-cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="With Slurm: keep the last view of the node in a file here, shared by the node's "
    "agent processes, so a health check or prolog that finds nothing to write asks slurmctld "
    "nothing (slurm.read_every bounds its age).",
)
@click.option(
    "--interval",
    type=clikit.Duration(minimum=0.1),
    default=None,
    show_default="60s",
    help="Time between check rounds.",
)
@click.option(
    "--strike-limit",
    type=click.IntRange(min=1),
    default=None,
    show_default="3",
    help="Consecutive failed rounds before fencing: GPU -> repair=reboot, network -> slow-network.",
)
@click.option(
    "--taints",
    default=None,
    metavar="PRESET",
    show_default="default",
    help="Taint name preset: default (fleetmedic.io/repair=<step>) or ossci "
    "(repair-reboot, ...). Must match the controller's.",
)
@click.option(
    "--kernel-log",
    default=None,
    metavar="SOURCE",
    show_default="kmsg",
    help="Kernel log to follow: kmsg (/dev/kmsg), journal, a file path "
    "(e.g. /var/log/kern.log), or none.",
)
@click.option(
    "--fabricmanager-log",
    default=None,
    metavar="SOURCE",
    show_default="auto",
    help="NVIDIA Fabric Manager's log to follow (NVSwitch systems): auto (the file "
    "/var/log/fabricmanager.log if it exists, else nothing), journal (its systemd unit), "
    "a file path, or none.",
)
@click.option(
    "--kernel-poll",
    type=clikit.Duration(minimum=0.01),
    default=None,
    show_default="0.1s",
    help="Longest wait on an idle kernel log *file*; it wakes on each "
    "write through inotify, this bounds the wait where no event comes.",
)
@click.option(
    "--boot-id-file",
    default=None,
    metavar="PATH",
    show_default="/proc/sys/kernel/random/boot_id",
    help="Where to read the kernel boot id.",
)
@probe_options
@click.option(
    "--retry-cap",
    type=clikit.Duration(minimum=0.1),
    default=None,
    show_default="30s",
    help="Longest wait between retries while the API server is down.",
)
@click.option(
    "--alive-file",
    default=None,
    metavar="PATH",
    help="Touch this file every round and while waiting for the API server (a liveness "
    "probe checks its age).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Serve Prometheus metrics on this port (checks, findings, strikes, last write).",
)
@click.option("--no-events", is_flag=True, help="Do not post Events on the Node.")
@click.option(
    "--once",
    is_flag=True,
    help="Read the kernel log once (against the watermark), run one check round, write "
    "the result, print it as JSON and exit.",
)
@click.option(
    "--once-timeout",
    type=clikit.DURATION,
    default="30s",
    help="With --once: how long to wait for the API server before giving up (exit 3).",
)
@click.option(
    "--exit-fenced",
    is_flag=True,
    help="With --once: exit 4 when the node carries our fence after the run (fenced now or "
    "before), else 0. For a Slurm Prolog, whose script turns 4 into its own exit 1: slurmctld "
    "then requeues the job and keeps our drain reason (docs/slurm.md). Not 1: Python exits 1 "
    "on any crash, and a crash must not fail the prolog.",
)
@clikit.log_level_option
def agent(
    config_path: Path,
    once: bool,
    once_timeout: float,
    exit_fenced: bool,
    log_level: str,
    **opts: Any,
) -> None:
    """Run the node agent: health checks, strikes and fencing of this node.

    Every --interval seconds it runs the GPU and network checks (only the network
    while the node carries a repair taint) and keeps consecutive failures as strikes
    in annotations on its own Node, so a restart resumes the count. --strike-limit
    GPU failures in a row taint the node fleetmedic.io/repair=reboot:NoSchedule;
    as many network failures taint it slow-network, and one passing network check
    removes that again. In its own thread it follows the kernel log, and a
    definitive finding (Xid 79 -> reboot, a row-remap failure -> manual) taints the
    node at once. It never removes a repair taint and never changes anything
    because it is stopping (SIGTERM just stops it).
    """
    _logging(log_level)
    from fleetmedic.agent.config import AgentConfig
    from fleetmedic.agent.loop import Agent

    try:
        if config_path.exists() or config_path != DEFAULT_CONFIG:
            base = AgentConfig.from_file(config_path)
        else:
            base = AgentConfig()
        cfg = _merge(base, opts)
        if not cfg.node_name:
            raise ConfigError("no node name: pass --node-name or set NODE_NAME")
        kube, kernel_kube = _connect(cfg, opts, lasting=not once)
        stop = threading.Event()
        if once:  # a bounded wait, then one line naming the server (exit 3)
            clikit.wait_reachable(
                lambda: kube.get_node(cfg.node_name), once_timeout, log=logging.getLogger(__name__)
            )
        worker = Agent(cfg, kube, kernel_kube=kernel_kube, stop=stop)
    except FleetmedicError as exc:
        clikit.fail(exc, clikit.exit_code_of(exc), "fleetmedic agent")

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if once:
        out = worker.run_once()
        if out is None:  # (the server answered, then stopped answering for retry_cap)
            from fleetmedic import kinds

            clikit.fail(
                f"{kinds.where(kube)} stopped answering within {cfg.retry_cap:g}s",
                clikit.EXIT_UNREACHABLE,
                "fleetmedic agent",
            )
        click.echo(
            json.dumps(
                {
                    "node": cfg.node_name,
                    "strikes": out.decision.strikes.to_json(),
                    "fenced": out.fenced,
                    "reason": out.decision.reason,
                    "kernel_findings_acted": worker.kernel.acted,
                    "kernel_findings_already_handled": worker.kernel.skipped,
                    "fabricmanager_findings_acted": worker.fabric.acted,
                    **({"held": out.held} if out.held else {}),
                }
            )
        )
        if exit_fenced and not out.held and (out.fenced or out.before_repair):
            sys.exit(clikit.EXIT_FENCED)
        return
    # The loop runs in a thread so SIGTERM is noticed at once, even mid-round.
    thread = threading.Thread(target=worker.run, name="fleetmedic-agent", daemon=True)
    thread.start()
    while thread.is_alive() and not stop.is_set():
        stop.wait(1.0)
    thread.join(timeout=10)
