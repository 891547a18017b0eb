"""``fleetmedic gpus``: this node's GPUs by identity, and what an RMA case needs of them.

The diagnose phase runs ``fleetmedic gpus --json`` into every evidence bundle; the
controller keeps each GPU's serial and UUID (NVIDIA) or serial and unique id (AMD) on the
Node and in its store, so a GPU is known across reboots, reimages and nodes
(model/gpus.py). Exit status: 0 when the GPUs were read (even a lost one: that is what
the report is for), 2 when nothing could be read at all.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from fleetmedic import clikit
from fleetmedic.checks import identity
from fleetmedic.checks.cli import load_config_file
from fleetmedic.checks.config import CheckConfig
from fleetmedic.checks.options import check_config_option
from fleetmedic.errors import ConfigError
from fleetmedic.model.gpufacts import GpuReport


def render(rep: GpuReport) -> str:
    if not rep.gpus:
        lines = [f"no GPUs read ({rep.vendor})"]
    else:
        head = ("GPU", "PCI", "SERIAL", "UNIQUE ID", "MODEL", "SIGNALS")
        rows = [head] + [
            (
                str(g.index),
                g.pci or "?",
                g.serial or "?",
                g.uid or "?",
                g.model or "?",
                ",".join(g.signals) or "-",
            )
            for g in rep.gpus
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(len(head) - 1)]
        lines = [
            "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1]
            for r in rows
        ]
    lines += [f"kernel log: {f.rule} on {f.pci or '?'}: {f.text[:100]}" for f in rep.logged]
    lines += [f"not read: {p}" for p in rep.problems]
    return "\n".join(line.rstrip() for line in lines)


@click.command(
    "gpus",
    epilog=clikit.epilog(
        "fleetmedic gpus", "fleetmedic gpus --json | jq '.gpus[].serial'", codes=(0, 2)
    ),
)
@clikit.json_option("Print the report as JSON (what the diagnose phase keeps).")
@click.option(
    "--vendor",
    type=click.Choice(["auto", "nvidia", "amd", "none"]),
    default=None,
    show_default="auto",
    help="GPU vendor; auto tries NVML, then amd-smi.",
)
@click.option(
    "--timeout",
    type=clikit.Duration(minimum=0.1),
    default=None,
    show_default="15s",
    help="Hard limit for the GPU tools; a tool still running is killed and named under 'not read'.",
)
@click.option(
    "--kernel-log",
    metavar="PATH",
    default=None,
    help="Kernel log file to scan for this boot's GPU faults instead of the node's own.",
)
@check_config_option("The node's check settings (vendor, timeout, kernel log); flags win.")
def gpus(
    as_json: bool,
    vendor: str | None,
    timeout: float | None,
    kernel_log: str | None,
    config_path: Path | None,
) -> None:
    """Show this node's GPUs: serial, UUID or unique id, PCI address, and the signs of a
    fault each shows now (lost, uncorrectable ECC, row-remap failure), with this boot's
    GPU faults from the kernel log."""
    data = load_config_file(config_path)
    for key, value in (("vendor", vendor), ("timeout", timeout)):
        if value is not None:
            data[key] = value
    if kernel_log is not None:
        data["kernel"] = {**dict(data.get("kernel") or {}), "path": kernel_log}
    try:
        cfg = CheckConfig.from_mapping(data)
    except ConfigError as exc:
        clikit.fail(exc, clikit.EXIT_USAGE, "fleetmedic gpus")
    rep = identity.report(cfg)
    if as_json:
        click.echo(json.dumps(rep.to_json(), indent=2))
    else:
        click.echo(render(rep))
    sys.exit(0 if rep.gpus or rep.vendor == "none" else 2)
