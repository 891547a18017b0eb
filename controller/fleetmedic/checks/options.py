"""The probe options that ``fleetmedic check`` and ``fleetmedic agent`` share, declared once
so the two commands take the same flags with the same meaning and limits."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from fleetmedic import clikit

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_CONFIG = Path("/etc/fleetmedic/check.yaml")
"""The node's check settings (written by the agent's installer); absent is fine."""

_PROBE_OPTIONS = (
    click.option(
        "--vendor",
        type=click.Choice(["auto", "nvidia", "amd", "none"]),
        default=None,
        show_default="auto",
        help="GPU vendor; auto takes the node's fleetmedic.io/gpu-vendor label, else "
        "looks at the devices.",
    ),
    click.option(
        "--expected-gpus",
        type=click.IntRange(min=0),
        default=None,
        help="GPUs this node should have when it has no fleetmedic.io/expected-gpus label.",
    ),
    click.option(
        "--timeout",
        type=clikit.Duration(minimum=0.1),
        default=None,
        show_default="15s",
        help="Hard limit per probe; a probe still running is killed and reads unknown, "
        "which neither counts a strike nor clears one.",
    ),
    click.option(
        "--peer",
        "peers",
        multiple=True,
        metavar="HOST[:PORT]",
        help="iperf3 server for the network probe (repeatable, first that answers). "
        "None: no network check.",
    ),
    click.option(
        "--min-mbps",
        type=click.FloatRange(min=0),
        default=None,
        show_default="1000",
        help="Throughput below this many Mbit/s is a network failure.",
    ),
    click.option(
        "--network-duration",
        type=clikit.Duration(minimum=0.5),
        default=None,
        show_default="3s",
        help="Time of iperf3 traffic per probe.",
    ),
)


def probe_options(fn: F) -> F:
    """--vendor, --expected-gpus, --timeout, --peer, --min-mbps, --network-duration."""
    for option in reversed(_PROBE_OPTIONS):
        fn = option(fn)
    return fn


def check_config_option(help: str) -> Callable[[F], F]:
    """--config: the node's check settings, as ``check``, ``diag`` and ``collective`` read
    them (``help`` says what each command takes from them)."""
    return click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False, path_type=Path),
        envvar="FLEETMEDIC_CHECK_CONFIG",
        default=DEFAULT_CONFIG,
        show_default=True,
        help=help,
    )
