"""tests/harness/procs.py: one way to find what setup built and read its VERSIONS, and the
switches that replace a real part refused under CI=true (by the harness, pytest and
scripts/test.sh alike)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import loadscale, procs

ROOT = Path(__file__).resolve().parents[3]


class Missing(Exception):
    pass


def test_read_versions(tmp_path: Path) -> None:
    assert procs.read_versions(tmp_path) == {}
    (tmp_path / "VERSIONS").write_text("loki 3.5.7\npromtool 0.305.0 (go1.24)\n")
    assert procs.read_versions(tmp_path) == {"loki": "3.5.7", "promtool": "0.305.0 (go1.24)"}


def test_built_dir_names_what_is_missing_and_how_to_build(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(procs, "CACHE_DIR", tmp_path)
    (tmp_path / "x-bin-1").mkdir()
    (tmp_path / "x-bin-1" / "a").touch()
    with pytest.raises(Missing, match=r"^b not built \(missing in .*x-bin-1\); run: bash s\.sh$"):
        procs.built_dir("FLEETMEDIC_X_BIN", "x-bin-1", ("a", "b"), Missing, "bash s.sh")
    (tmp_path / "x-bin-1" / "b").touch()
    assert procs.built_dir("FLEETMEDIC_X_BIN", "x-bin-1", ("a", "b"), Missing, "h") == (
        tmp_path / "x-bin-1"
    )


def test_an_override_is_a_developers_build_and_refused_under_ci(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(procs, "CACHE_DIR", tmp_path / "nothing")
    (tmp_path / "a").touch()
    monkeypatch.setenv("FLEETMEDIC_KUBE_BIN", str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    assert procs.built_dir("FLEETMEDIC_KUBE_BIN", "k", ("a",), Missing, "h") == tmp_path
    monkeypatch.setenv("CI", "true")
    with pytest.raises(Missing, match="refused under CI=true: FLEETMEDIC_KUBE_BIN"):
        procs.built_dir("FLEETMEDIC_KUBE_BIN", "k", ("a",), Missing, "h")


@pytest.mark.parametrize("var", procs.REPLACING_SWITCHES)
def test_every_replacing_switch_is_refused_under_ci(var: str) -> None:
    with pytest.raises(procs.ReplacedUnderCI, match=var):
        procs.refuse_under_ci({"CI": "true", var: "1"})
    procs.refuse_under_ci({var: "1"})  # a desk may
    procs.refuse_under_ci({"CI": "true", var: ""})
    assert procs.replacing_switches({"FLEETMEDIC_RECEPTOR_PATCHED": "0"}) == []


def test_every_bin_switch_the_harness_reads_is_a_replacing_switch() -> None:
    """A new FLEETMEDIC_*_BIN in the harness is refused under CI like the others."""
    import re

    read = set()
    for f in (ROOT / "tests" / "harness").glob("*.py"):
        read |= set(re.findall(r"FLEETMEDIC_[A-Z0-9_]+_BIN\b", f.read_text()))
    assert read and read <= set(procs.REPLACING_SWITCHES)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETMEDIC_")}
    env.pop("CI", None)
    return {**env, **extra}


def test_pytest_refuses_a_replacing_switch_under_ci() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "tests/unit/harness"],
        cwd=ROOT,
        env=_env(CI="true", FLEETMEDIC_RECEPTOR_PATCHED="1"),
        capture_output=True,
        text=True,
    )
    assert p.returncode != 0
    assert "refused under CI=true: FLEETMEDIC_RECEPTOR_PATCHED" in p.stderr + p.stdout


def test_test_sh_refuses_a_replacing_switch_under_ci() -> None:
    p = subprocess.run(
        ["bash", str(ROOT / "scripts" / "test.sh")],
        cwd=ROOT,
        env=_env(CI="true", FLEETMEDIC_LOKI_BIN="/srv/my-loki"),
        capture_output=True,
        text=True,
        timeout=loadscale.guard(60),
    )
    assert p.returncode == 2, p.stdout + p.stderr
    assert "refused under CI=true: FLEETMEDIC_LOKI_BIN" in p.stderr


def test_an_xfail_mark_is_refused(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text(
        "import pytest\n\n@pytest.mark.xfail(reason='flaky')\ndef test_x():\n    assert 0\n"
    )
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", str(tmp_path)],
        cwd=tmp_path,
        env={**_env(), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert p.returncode != 0
    assert "marked xfail: test_x.py::test_x" in p.stderr + p.stdout
