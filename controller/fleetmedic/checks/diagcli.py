"""``fleetmedic diag --level N``: run the vendor diagnostics on this node once.

NVIDIA: ``dcgmi diag -r N`` (levels 1-4); AMD: the ROCm Validation Suite's ``rvs -r N``
(levels 1-5). ``--vendor auto`` picks the one installed (dcgmi first).

Exit status as ``fleetmedic check``: 0 passed, 1 a test failed, 2 unknown (the tool is
missing, timed out, or printed no diagnostic). ``--json`` prints the result with every
test's per-GPU outcome, for the diagnostics playbook to keep as evidence.
"""

from __future__ import annotations

import json
import shutil
import sys

import click

from fleetmedic.checks import rvs as rvs_tool
from fleetmedic.checks.base import EXIT_CODES, unknown
from fleetmedic.checks.diag import DEFAULT_TIMEOUTS as DCGM_LEVELS
from fleetmedic.checks.diag import run_dcgm


def pick_vendor(dcgmi: str, rvs: str) -> str | None:
    if shutil.which(dcgmi):
        return "nvidia"
    if shutil.which(rvs) or shutil.which(rvs, path=rvs_tool.ROCM_BIN):
        return "amd"
    return None


@click.command("diag")
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
@click.option("--timeout", type=click.FloatRange(min=1), help="Seconds (default per level).")
@click.option("--dcgmi", default="dcgmi", show_default=True, help="dcgmi program to run.")
@click.option("--rvs", default="rvs", show_default=True, help="rvs program to run.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def diag(
    level: int, vendor: str, timeout: float | None, dcgmi: str, rvs: str, as_json: bool
) -> None:
    """Run the vendor's diagnostics at LEVEL with a timeout and judge them (exit 0/1/2)."""
    chosen = pick_vendor(dcgmi, rvs) if vendor == "auto" else vendor
    if chosen == "nvidia" and level not in DCGM_LEVELS:
        raise click.UsageError(f"DCGM has levels 1-4, not {level}")
    if chosen == "nvidia":
        result = run_dcgm(level, timeout=timeout, dcgmi=dcgmi)
    elif chosen == "amd":
        result = rvs_tool.run_rvs(level, timeout=timeout, rvs=rvs)
    else:
        result = unknown("diag", f"neither {dcgmi} nor {rvs} is installed", level=level)
    if as_json:
        click.echo(json.dumps(result.to_dict(), sort_keys=True))
    else:
        rung = f" (rung: {result.action})" if result.action else ""
        click.echo(f"{result.name}: {result.status}: {result.summary}{rung}")
    sys.exit(EXIT_CODES[result.status])
