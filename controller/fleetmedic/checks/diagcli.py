"""``fleetmedic diag --level N``: run the vendor diagnostics on this node once.

Exit status as ``fleetmedic check``: 0 passed, 1 a test failed, 2 unknown (the tool is
missing, timed out, or printed no diagnostic). ``--json`` prints the result with every
test's per-GPU outcome, for the diagnostics playbook to keep as evidence.
"""

from __future__ import annotations

import json
import sys

import click

from fleetmedic.checks.base import EXIT_CODES
from fleetmedic.checks.diag import run_dcgm


@click.command("diag")
@click.option(
    "--level",
    "-r",
    type=click.IntRange(1, 4),
    default=1,
    show_default=True,
    help="DCGM run level: 1 quick (seconds), 2 medium (minutes), 3 long, 4 extended (hours).",
)
@click.option("--timeout", type=click.FloatRange(min=1), help="Seconds (default per level).")
@click.option("--dcgmi", default="dcgmi", show_default=True, help="dcgmi program to run.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def diag(level: int, timeout: float | None, dcgmi: str, as_json: bool) -> None:
    """Run `dcgmi diag -r LEVEL -j` with a timeout and judge it (exit 0/1/2)."""
    result = run_dcgm(level, timeout=timeout, dcgmi=dcgmi)
    if as_json:
        click.echo(json.dumps(result.to_dict(), sort_keys=True))
    else:
        rung = f" (rung: {result.action})" if result.action else ""
        click.echo(f"{result.name}: {result.status}: {result.summary}{rung}")
    sys.exit(EXIT_CODES[result.status])
