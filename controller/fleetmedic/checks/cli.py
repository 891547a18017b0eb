"""``fleetmedic check``: run every check on this node once.

Exit status follows node-problem-detector's custom plugins: 0 healthy,
1 problem, 2 unknown (a probe timed out or could not tell). The repair
playbooks' verify step runs ``fleetmedic check --json`` and reads the same.

``--hardware-profile p5`` also compares the node with a hardware profile (the agent picks
one from the Node's instance-type label; this command has no Node, so it is named).
RDMA error counters need two readings: a single run judges port state only.
"""

from __future__ import annotations

import datetime
import json
import socket
import sys
from pathlib import Path
from typing import Any

import click

from fleetmedic import clikit
from fleetmedic.checks import hwprofile
from fleetmedic.checks.base import CATEGORIES, CheckResult, exit_code, overall
from fleetmedic.checks.config import CheckConfig
from fleetmedic.checks.options import DEFAULT_CONFIG, check_config_option, probe_options
from fleetmedic.checks.runner import run_checks
from fleetmedic.errors import ConfigError
from fleetmedic.model.settings import read_yaml


def load_config_file(path: Path | None) -> dict[str, Any]:
    if path is None or (path == DEFAULT_CONFIG and not path.exists()):
        return {}
    try:
        data = read_yaml(path, "check config") or {}
    except ConfigError as exc:
        clikit.fail(exc, clikit.EXIT_USAGE, "fleetmedic check")
    if not isinstance(data, dict):
        clikit.fail(
            f"check config {path}: expected a mapping", clikit.EXIT_USAGE, "fleetmedic check"
        )
    section = data.get("checks", data)
    return dict(section) if isinstance(section, dict) else {}


def _status_cell(r: CheckResult) -> str:
    if r.status == "problem":
        return "PROBLEM"
    return "ok (n/a)" if r.status == "ok" and not r.applicable else r.status


def render_table(results: list[CheckResult]) -> str:
    if not results:
        return "no checks ran (nothing configured for this node)"
    width = max(len(r.name) for r in results)
    lines = [f"{'CHECK':<{width}}  {'STATUS':<8}  SUMMARY"]
    for r in results:
        action = f" [action: {r.action}]" if r.action else ""
        lines.append(f"{r.name:<{width}}  {_status_cell(r):<8}  {r.summary}{action}")
    status = overall(results)
    lines.append(f"\noverall: {status} (exit {exit_code(results)})")
    return "\n".join(lines)


@click.command(
    "check",
    epilog=clikit.epilog(
        "fleetmedic check",
        "fleetmedic check --category gpu --hardware-profile p5 --json",
        codes=(0, 1, 2),
    )
    + "\n  (2 is also node-problem-detector's 'unknown': a probe could not tell)",
)
@clikit.json_option("Print results as JSON instead of a table.")
@probe_options
@click.option(
    "--category",
    "categories",
    multiple=True,
    type=click.Choice(CATEGORIES),
    help="Only these categories (repeatable). Default: all.",
)
@click.option(
    "--kernel-log",
    metavar="PATH",
    default=None,
    help="Kernel log file to scan instead of the node's own log (as the agent's "
    "--kernel-log, a file path only).",
)
@click.option(
    "--hardware-profile",
    "profile",
    default=None,
    metavar="NAME",
    help="Compare this node with the hardware profile NAME (p5, mi300x-8, ... or one of "
    "--hardware-profiles): GPU count, model, memory, links, PCIe, RDMA ports and rate.",
)
@click.option(
    "--hardware-profiles",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="YAML of your own hardware profiles, added to (or replacing by name) the shipped ones.",
)
@click.option(
    "--sysfs-root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Read RDMA ports from <ROOT>/class/infiniband instead of /sys (a captured tree).",
)
@check_config_option(
    "YAML with this node's check settings (a `checks:` section, or the settings at "
    "top level), e.g. written by the agent's installer from the Node's labels; "
    "ignored if absent. Flags win."
)
def check(
    as_json: bool,
    vendor: str | None,
    expected_gpus: int | None,
    timeout: float | None,
    peers: tuple[str, ...],
    min_mbps: float | None,
    network_duration: float | None,
    categories: tuple[str, ...],
    kernel_log: str | None,
    profile: str | None,
    hardware_profiles: Path | None,
    sysfs_root: Path | None,
    config_path: Path | None,
) -> None:
    """Run every health check on this node once (exit 0 healthy, 1 problem, 2 unknown).

    GPU (NVML / amd-smi), driver, kernel log, hardware profile, RDMA fabric and network
    throughput checks, each ok, problem or unknown; the repair playbooks' verify step
    runs `fleetmedic check --json` and reads the same exit status.
    """
    data = load_config_file(config_path)
    overrides: tuple[tuple[str, Any], ...] = (
        ("vendor", vendor),
        ("expected_gpus", expected_gpus),
        ("timeout", timeout),
    )
    for key, value in overrides:
        if value is not None:
            data[key] = value
    net = dict(data.get("network") or {})
    for key, value in (
        ("peers", list(peers) or None),
        ("min_mbps", min_mbps),
        ("duration", network_duration),
    ):
        if value is not None:
            net[key] = value
    data["network"] = net
    if kernel_log is not None:
        data["kernel"] = {**dict(data.get("kernel") or {}), "path": str(kernel_log)}
    for section, key, value in (
        ("hardware", "profile", profile),
        ("hardware", "profiles", hardware_profiles),
        ("fabric", "sysfs_root", sysfs_root),
    ):
        if value is not None:
            data[section] = {**dict(data.get(section) or {}), key: str(value)}
    try:
        cfg = CheckConfig.from_mapping(data)
        hw = cfg.hardware
        if hw.enabled and hw.profile:  # a typo is a usage error, not an unknown result
            hwprofile.choose(hwprofile.load(hw.profiles), {}, profile=hw.profile)
    except (ConfigError, hwprofile.ProfileError) as exc:
        clikit.fail(exc, clikit.EXIT_USAGE, "fleetmedic check")  # one line, as every command

    results = run_checks(cfg, categories or None)
    code = exit_code(results)
    if as_json:
        doc = {
            "host": socket.gethostname(),
            "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "status": overall(results),
            "exit_code": code,
            "results": [r.to_dict() for r in results],
        }
        click.echo(json.dumps(doc, indent=2, sort_keys=False))
    else:
        click.echo(render_table(results))
    sys.exit(code)
