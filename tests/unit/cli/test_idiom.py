"""The one command-line idiom (fleetmedic/clikit.py, issue 33 part 1), checked over the
whole command tree: every command's help ends with examples and the exit codes, no
option name means two things, durations parse the same everywhere, defaults are shown,
long-running commands take a checked --log-level, --json is the machine-output flag."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from fleetmedic import clikit
from fleetmedic.cli import cli

LONG_RUNNING = {"run", "agent", "watch loki"}


def walk(group: click.Group, ctx: click.Context, prefix: str = ""):
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None, name
        path = f"{prefix}{name}"
        yield path, cmd
        if isinstance(cmd, click.Group):
            yield from walk(cmd, click.Context(cmd, parent=ctx, info_name=name), path + " ")


COMMANDS = dict(walk(cli, click.Context(cli, info_name="fleetmedic")))
CHECKED = COMMANDS


def options(cmd: click.Command) -> list[click.Option]:
    return [p for p in cmd.params if isinstance(p, click.Option) and p.name != "help"]


def test_the_tree_is_walked_whole():
    assert {"run", "agent", "check", "diag", "status", "history", "config check"} <= set(COMMANDS)
    assert {"breaker status", "breaker reset", "watch loki"} <= set(COMMANDS)


@pytest.mark.parametrize("path", sorted(CHECKED))
def test_help_ends_with_examples_and_exit_codes(path):
    args = [*path.split(), "--help"]
    r = CliRunner().invoke(cli, args, prog_name="fleetmedic")
    assert r.exit_code == 0, r.output
    tail = r.output[r.output.index("Examples:") :]
    examples = [line.strip() for line in tail.splitlines()[1:] if line.strip()]
    assert examples[0].startswith(f"fleetmedic {path.split()[0]}"), examples
    assert "Exit status:" in tail
    for code in (0, 2):
        assert f"{code}  " in tail


def test_top_level_help_has_the_ladder_and_every_exit_code():
    out = CliRunner().invoke(cli, ["--help"]).output
    words = " ".join(out.split())
    for rung in ("diagnose", "reset", "reboot", "power_cycle", "reimage", "replace", "manual"):
        assert rung in words
    for code, meaning in clikit.EXIT_CODES.items():
        assert f"{code} {meaning}" in words


def test_no_option_name_means_two_things():
    seen: dict[str, tuple[str, str]] = {}
    for path, cmd in CHECKED.items():
        for opt in options(cmd):
            for name in opt.opts + opt.secondary_opts:
                kind = type(opt.type).__name__ + ("/flag" if opt.is_flag else "")
                if name in seen:
                    assert seen[name][1] == kind, (name, path, seen[name])
                seen.setdefault(name, (path, kind))
    # --profile is a pool profile (breaker); a hardware profile is --hardware-profile
    assert "--profile" not in [n for o in options(COMMANDS["check"]) for n in o.opts]
    for banned in ("-v", "--verbose", "--format", "--duration"):
        assert banned not in seen, (banned, seen.get(banned))


DURATION_OPTIONS = {
    "--interval",
    "--timeout",
    "--kernel-poll",
    "--network-duration",
    "--retry-cap",
    "--poll-interval",
    "--lookback",
    "--once-timeout",
}


def test_durations_parse_the_same_everywhere():
    found = 0
    for path, cmd in CHECKED.items():
        for opt in options(cmd):
            if DURATION_OPTIONS & set(opt.opts):
                found += 1
                assert isinstance(opt.type, clikit.Duration), (path, opt.opts)
                assert opt.type.convert("90s", opt, None) == 90
                assert opt.type.convert("10m", opt, None) == 600
                assert opt.type.convert("1h", opt, None) == 3600
                assert opt.type.convert("5", opt, None) == 5
                with pytest.raises(click.BadParameter):
                    opt.type.convert("-5", opt, None)
    assert found >= 12


def test_defaults_are_shown_and_long_running_commands_take_a_checked_log_level():
    ctx = click.Context(cli, info_name="fleetmedic", **cli.context_settings)
    assert ctx.show_default is True  # (every command's context inherits it)
    for path, cmd in CHECKED.items():
        for opt in options(cmd):
            assert opt.show_default is not False, (path, opt.opts)
        names = {n for o in options(cmd) for n in o.opts}
        if path in LONG_RUNNING:
            [level] = [o for o in options(cmd) if "--log-level" in o.opts]
            assert isinstance(level.type, click.Choice)
            assert tuple(level.type.choices) == clikit.LOG_LEVELS
        if "--json" in names:
            [j] = [o for o in options(cmd) if "--json" in o.opts]
            assert j.is_flag and j.name == "as_json", path


def test_node_names_are_kubernetes_names():
    assert clikit.check_node_name("gpu-node-7.example.com") is None
    for bad in ("", "a" * 254, "Node1", "n1;rm -rf /", "-n1", "n1-", "n_1", "$(id)"):
        assert clikit.check_node_name(bad), bad
