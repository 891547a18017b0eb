import subprocess
import sys

from fleetmedic import __version__


def run(*args):
    return subprocess.run(
        [sys.executable, "-m", "fleetmedic", *args], capture_output=True, text=True
    )


def test_version():
    r = run("--version")
    assert r.returncode == 0 and __version__ in r.stdout and __version__ != "0.0.0+unknown"


def test_help_lists_subcommands():
    r = run("--help")
    assert r.returncode == 0
    for name in ("scan", "check", "agent", "run", "status", "plan", "release", "reset"):
        assert name in r.stdout


def test_unknown_command_fails():
    r = run("frobnicate")
    assert r.returncode == 2 and "No such command" in r.stderr
