"""``fleetmedic collective``: the burn-in's single-node all-reduce, judged against the
node's hardware profile (checks/collective.py).

Runs ``all_reduce_perf -b 8 -e 1G -f 2 -g <gpus>`` (nccl-tests on NVIDIA; rccl-tests
builds the same program on AMD: ``--program`` names its path) with a hard timeout. The
expected bus bandwidth is the hardware profile's ``expected_busbw_gbps``: the profile named
by ``--profile``, else the one whose ``match`` holds a ``--label`` value (the controller
passes the Node's), else the check config's (``hardware.profile``/``pool``, with the
operator's ``hardware.profiles`` file); ``--expected-busbw`` names a figure outright.
GPUs: ``--gpus``, else the profile's ``gpus``, else the check config's ``expected_gpus``.

Exit status as ``fleetmedic check``: 0 passed, 1 too slow or wrong values, 2 unknown (the
tool missing, failed or timed out, or no figure to compare with); 2 is also a usage error,
which prints one line on stderr.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from fleetmedic import clikit
from fleetmedic.checks import collective, hwprofile
from fleetmedic.checks.base import EXIT_CODES, CheckResult
from fleetmedic.checks.cli import load_config_file
from fleetmedic.checks.config import CheckConfig
from fleetmedic.checks.options import check_config_option
from fleetmedic.checks.proc import run_bounded
from fleetmedic.errors import ConfigError

PROG = "fleetmedic collective"


@click.command(
    "collective",
    epilog=clikit.epilog(
        "fleetmedic collective --json --label node.kubernetes.io/instance-type=p5.48xlarge",
        "fleetmedic collective --expected-busbw 460 --gpus 8",
        codes=(0, 1, 2),
    ),
)
@click.option("--gpus", "-g", type=click.IntRange(1, 64), help="GPUs to run across.")
@click.option("--profile", help="Hardware profile whose expected_busbw_gbps to compare with.")
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="KEY=VALUE",
    help="A Node label; its value picks the hardware profile (a profile's match list).",
)
@click.option("--expected-busbw", type=click.FloatRange(min=0, min_open=True), help="GB/s.")
@click.option(
    "--tolerance",
    type=click.FloatRange(0, 1, max_open=True),
    help="Fraction below the figure that still passes (default: the profile's, else 0.2).",
)
@click.option("--program", default="all_reduce_perf", show_default=True)
@click.option("--timeout", type=clikit.Duration(minimum=1), default=600.0, show_default=True)
@clikit.json_option("Print the result as JSON.")
@check_config_option(
    "The node's check settings (as `fleetmedic check`): hardware profiles, GPU count."
)
def collective_cmd(
    gpus: int | None,
    profile: str | None,
    labels: tuple[str, ...],
    expected_busbw: float | None,
    tolerance: float | None,
    program: str,
    timeout: float,
    as_json: bool,
    config_path: Path | None,
) -> None:
    """Run a single-node all-reduce and judge its bus bandwidth (exit 0/1/2)."""
    try:
        cfg = CheckConfig.from_mapping(load_config_file(config_path))
        name, body = _profile(cfg, profile, labels)
    except (ConfigError, hwprofile.ProfileError, ValueError) as exc:
        clikit.fail(exc, clikit.EXIT_USAGE, PROG)
    expected = hwprofile.expected_busbw(body) if body else None
    if expected_busbw is not None:
        expected = (expected_busbw, expected[1] if expected else hwprofile.BUSBW_TOLERANCE)
    if expected is not None and tolerance is not None:
        expected = (expected[0], tolerance)
    n = gpus or int((body or {}).get("gpus") or 0) or cfg.expected_gpus
    if not n:
        clikit.fail("how many GPUs? give --gpus (no profile or check config says)", 2, PROG)
    run = run_bounded([program, *collective.SWEEP, "-g", str(n)], timeout, key="collective")
    sweep = collective.parse(run.stdout) if run.ok else None
    result = collective.judge(sweep, expected, profile=name, gpus=n, failure=run.describe())
    _print(result, as_json)
    sys.exit(EXIT_CODES[result.status])


def _profile(
    cfg: CheckConfig, named: str | None, labels: tuple[str, ...]
) -> tuple[str | None, dict | None]:
    hw = cfg.hardware
    profiles = hwprofile.load(hw.profiles)
    given = dict(_pair(x) for x in labels)
    if named:
        chosen, _ = hwprofile.choose(profiles, {}, profile=named)
        return chosen, dict(profiles[chosen]) if chosen else None
    for key, value in given.items():
        picked = hwprofile.select(profiles, {key: value}, key)
        if picked:
            return picked[0], dict(picked[1])
    if hw.profile:
        chosen, _ = hwprofile.choose(profiles, {}, profile=hw.profile)
        return chosen, dict(profiles[chosen]) if chosen else None
    picked = hwprofile.select(profiles, {}, hw.label, hw.pool)
    return (picked[0], dict(picked[1])) if picked else (None, None)


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"--label wants KEY=VALUE, got {text!r}")
    return key, value


def _print(result: CheckResult, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(result.to_dict(), sort_keys=True))
    else:
        click.echo(f"{result.name}: {result.status}: {result.summary}")
