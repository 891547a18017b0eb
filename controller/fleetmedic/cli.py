"""The ``fleetmedic`` command line.

Subcommands live in their own modules and are imported only when invoked, so
``fleetmedic scan`` and ``fleetmedic check`` on a node do not pay for importing
the Kubernetes client, and ``--help`` stays fast. Each entry maps a name to
``module:attribute`` where the attribute is a ``click.Command``.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from fleetmedic import clikit
from fleetmedic.errors import FleetmedicError, one_line

# name -> (module:click-command, one-line help shown in `fleetmedic --help`)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "scan": ("fleetmedic.scan.cli:scan", "Classify GPU faults in kernel logs (files or stdin)."),
    "check": (
        "fleetmedic.checks.cli:check",
        "Run every health check on this node once (exit 0 healthy, 1 problem, 2 unknown).",
    ),
    "diag": (
        "fleetmedic.checks.diagcli:diag",
        "Run the vendor GPU diagnostics (dcgmi diag / rvs) once (exit 0 passed, 1 failed).",
    ),
    "gpus": (
        "fleetmedic.checks.gpuscli:gpus",
        "Show this node's GPUs by serial and UUID, and the signs of a fault each shows.",
    ),
    "collective": (
        "fleetmedic.checks.collectivecli:collective_cmd",
        "Run a single-node all-reduce; judge its bus bandwidth against the hardware profile.",
    ),
    "agent": ("fleetmedic.agent.cli:agent", "Run the node agent: checks, strikes, fencing."),
    "run": ("fleetmedic.service:run", "Run the remediation controller."),
    "config": ("fleetmedic.service:config", "Check a controller config (`config check`)."),
    "status": ("fleetmedic.controller.commands:status", "Show nodes by repair state."),
    "plan": (
        "fleetmedic.controller.commands:plan",
        "Show what the next cycle would do, changing nothing.",
    ),
    "release": (
        "fleetmedic.controller.manual:release",
        "Return a node in manual repair to service.",
    ),
    "quarantine": (
        "fleetmedic.controller.manual:quarantine",
        "Deep diagnostics and a recommendation before a node returns to service.",
    ),
    "history": (
        "fleetmedic.controller.commands:history",
        "Show a node's whole history: repair attempts and Events, newest first.",
    ),
    "reset": ("fleetmedic.controller.manual:reset", "Remove every fleetmedic taint (only ours)."),
    "breaker": ("fleetmedic.controller.manual:breaker", "Show or reset the circuit breaker."),
    "domain": (
        "fleetmedic.controller.domaincli:domain",
        "Show or release domain incidents (a rack or NVLink domain failing together).",
    ),
    "watch": (
        "fleetmedic.agent.lokicli:watch",
        "Detect GPU faults from Loki instead of an agent on every node.",
    ),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(SUBCOMMANDS) | set(super().list_commands(ctx)))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in SUBCOMMANDS:
            return super().get_command(ctx, name)
        target, short_help = SUBCOMMANDS[name]
        module_name, attr = target.split(":")
        command = getattr(importlib.import_module(module_name), attr)
        command.short_help = command.short_help or short_help
        return command


@click.group(
    cls=LazyGroup,
    context_settings=clikit.CONTEXT,
    epilog=clikit.epilog(
        "fleetmedic config check --config /etc/fleetmedic/controller.yaml",
        "fleetmedic status --all",
        codes=(0, 1, 2, 3, 4),
    ),
)
@click.version_option(
    package_name="fleetmedic", prog_name="fleetmedic"
)  # looked up only for --version
def cli() -> None:
    """fleetmedic keeps a GPU fleet healthy: it fences faulty GPU nodes and repairs them.

    An agent on every node (or `watch loki`) fences a node with GPU, driver or
    network faults with a Kubernetes NoSchedule taint; the controller (`run`)
    climbs each fenced node up its repair ladder with Ansible over SSH, one rung
    per attempt: diagnose, reset (the GPU), reboot, power_cycle (through the
    BMC), reimage (driver/ROCm reinstall) or replace (hand it to the cloud), and
    at last manual: a human, with the evidence. Only a passing verify returns a
    node to service.
    """


def main() -> None:
    try:
        cli.main(standalone_mode=False)  # (click's errors are printed below, in one line)
    except click.ClickException as exc:
        if isinstance(exc, getattr(click.exceptions, "NoArgsIsHelpError", ())):
            click.echo(exc.format_message(), err=True)  # (a bare group: its help)
            sys.exit(exc.exit_code)
        # click prints a usage error as three lines around "Error: ..."; here it is the one
        # line every fleetmedic error is, with where to look for the usage
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx is not None else "fleetmedic"
        hint = f" (see `{where} --help`)" if isinstance(exc, click.UsageError) else ""
        click.echo(f"{where}: error: {exc.format_message()}{hint}", err=True)
        sys.exit(exc.exit_code)
    except click.Abort:  # "no" at a confirmation (nothing done), or Ctrl-C (maybe midway)
        click.echo(
            "fleetmedic: aborted (a write already made stays, with its audit line)", err=True
        )
        sys.exit(clikit.EXIT_USAGE)
    except FleetmedicError as exc:  # (commands map their own; a last resort)
        clikit.fail(exc, clikit.exit_code_of(exc))
    except Exception as exc:
        # No traceback for an operator at 3 a.m.; FLEETMEDIC_DEBUG=1 shows it (the
        # fuzz test runs with it, so a bug that ends here still fails a test).
        if os.environ.get("FLEETMEDIC_DEBUG"):
            raise
        click.echo(
            f"fleetmedic: internal error: {type(exc).__name__}: {one_line(exc)} "
            "(FLEETMEDIC_DEBUG=1 shows the traceback)",
            err=True,
        )
        sys.exit(clikit.EXIT_USAGE)
