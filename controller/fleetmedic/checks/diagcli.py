"""``fleetmedic diag --level N``: run the vendor diagnostics on this node once.

NVIDIA: ``dcgmi diag -r N`` (levels 1-4); AMD: the ROCm Validation Suite's ``rvs -r N``
(levels 1-5). ``--vendor auto`` picks the one installed (dcgmi first).

Exit status as ``fleetmedic check``: 0 passed, 1 a test failed, 2 unknown (the tool is
missing, timed out, or printed no diagnostic). ``--json`` prints the result with every
test's per-GPU outcome, for the diagnostics playbook to keep as evidence.

``--fabric`` also reads the RDMA ports (``fabric.ports``; with the check config's hardware
profile, its RDMA figures too), as the quarantine rung's run does: the JSON gains a
``fabric`` list of those results and the exit status is the worse of both. One reading
only, so counter growth is not judged here (the agent's rounds do that).
"""

from __future__ import annotations

import json
import shutil
import sys
import threading
from pathlib import Path

import click

from fleetmedic import clikit
from fleetmedic.checks import rvs as rvs_tool
from fleetmedic.checks.base import EXIT_CODES, CheckResult, unknown, worst
from fleetmedic.checks.cli import load_config_file
from fleetmedic.checks.config import CheckConfig
from fleetmedic.checks.diag import DEFAULT_TIMEOUTS as DCGM_LEVELS
from fleetmedic.checks.diag import run_dcgm
from fleetmedic.checks.options import check_config_option
from fleetmedic.checks.runner import fabric_checks, resolve_profile
from fleetmedic.errors import ConfigError


def pick_vendor(dcgmi: str, rvs: str) -> str | None:
    if shutil.which(dcgmi):
        return "nvidia"
    if shutil.which(rvs) or shutil.which(rvs, path=rvs_tool.ROCM_BIN):
        return "amd"
    return None


@click.command(
    "diag",
    epilog=clikit.epilog(
        "fleetmedic diag --level 1", "fleetmedic diag --level 3 --fabric --json", codes=(0, 1, 2)
    )
    + "\n  (2 is also 'unknown': the tool is missing, timed out, or printed no diagnostic)",
)
@click.option(
    "--level",
    "-r",
    type=click.IntRange(1, 5),
    default=1,
    show_default=True,
    help="Run level: 1 quick (seconds), 2 medium (minutes), 3 long, 4 extended (hours); "
    "RVS also has 5 (full stress, hours).",
)
@click.option(
    "--vendor",
    type=click.Choice(["auto", "nvidia", "amd"]),
    default="auto",
    show_default=True,
    help="nvidia: dcgmi diag; amd: rvs; auto: whichever is installed.",
)
@click.option(
    "--timeout",
    type=clikit.Duration(minimum=1),
    show_default="per level: " + ", ".join(f"{n}: {t:g}s" for n, t in sorted(DCGM_LEVELS.items())),
    help="Hard limit on the diagnostics run.",
)
@click.option("--dcgmi", default="dcgmi", show_default=True, help="dcgmi program to run.")
@click.option("--rvs", default="rvs", show_default=True, help="rvs program to run.")
@clikit.json_option("Print the result as JSON.")
@click.option(
    "--fabric",
    is_flag=True,
    help="Also check the RDMA ports (state; rate and count against the check config's "
    "hardware profile): the quarantine rung's run.",
)
@check_config_option("The node's check settings (as `fleetmedic check`): read for --fabric only.")
def diag(
    level: int,
    vendor: str,
    timeout: float | None,
    dcgmi: str,
    rvs: str,
    as_json: bool,
    fabric: bool,
    config_path: Path | None,
) -> None:
    """Run the vendor's diagnostics at LEVEL with a timeout and judge them (exit 0/1/2)."""
    cfg = None
    if fabric:
        try:
            cfg = CheckConfig.from_mapping(load_config_file(config_path))
        except ConfigError as exc:
            clikit.fail(exc, clikit.EXIT_USAGE, "fleetmedic diag")
    chosen = pick_vendor(dcgmi, rvs) if vendor == "auto" else vendor
    if chosen == "nvidia" and level not in DCGM_LEVELS:
        raise click.UsageError(f"DCGM has levels 1-4, not {level}")
    if chosen == "nvidia":
        result = run_dcgm(level, timeout=timeout, dcgmi=dcgmi)
    elif chosen == "amd":
        result = rvs_tool.run_rvs(level, timeout=timeout, rvs=rvs)
    else:
        result = unknown("diag", f"neither {dcgmi} nor {rvs} is installed", level=level)
    ports = fabric_results(cfg) if cfg is not None else None
    status = worst([result.status, *(r.status for r in ports or ())])
    if as_json:
        doc = result.to_dict()
        if ports is not None:
            doc["fabric"] = [r.to_dict() for r in ports]
        click.echo(json.dumps(doc, sort_keys=True))
    else:
        rung = f" (rung: {result.action})" if result.action else ""
        click.echo(f"{result.name}: {result.status}: {result.summary}{rung}")
        for r in ports or ():
            click.echo(f"{r.name}: {r.status}: {r.summary}")
    sys.exit(EXIT_CODES[status])


def fabric_results(cfg: CheckConfig) -> list[CheckResult]:
    """The fabric checks once, within the check timeout (a sysfs read of a wedged driver
    can block: then unknown, never healthy)."""
    profile, why = resolve_profile(cfg)
    out: list[CheckResult] = []
    thread = threading.Thread(
        target=lambda: out.extend(fabric_checks(cfg, profile)), name="fabric", daemon=True
    )
    thread.start()
    thread.join(cfg.timeout)
    if thread.is_alive():
        return [unknown("fabric.probe", f"RDMA ports not read within {cfg.timeout:g}s", "network")]
    return ([why] if why else []) + out
