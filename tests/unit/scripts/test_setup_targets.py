"""scripts/setup.sh builds what each command uses: every setup.d file says which commands
need it (NEEDED_BY), `make demo` builds only the demo's parts, `make test` and a bare
`make setup` everything."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SETUP = ROOT / "scripts" / "setup.sh"
TABLE = dict(re.findall(r'\[([\w.-]+)\]="([^"]*)"', SETUP.read_text()))


def test_every_step_says_which_commands_need_it():
    steps = {f.name for f in (ROOT / "scripts" / "setup.d").iterdir()}
    assert steps == set(TABLE), "scripts/setup.d and setup.sh's NEEDED_BY differ"
    for step, commands in TABLE.items():
        assert commands.split() and set(commands.split()) <= {"demo", "test"}, step
        assert "test" in commands.split(), f"{step}: `make test` builds everything"


def test_the_demo_builds_only_its_parts():
    """tests/harness/demo.py: the API server (etcd, kwok), the nspawn nodes with the fake
    GPU library, an SMTP sink (a pip extra, no build)."""
    demo = {s for s, c in TABLE.items() if "demo" in c.split()}
    assert demo == {
        "00-base.apt",
        "20-nodetree.apt",
        "20-nodetree.sh",
        "30-kube.apt",
        "30-kube.sh",
        "40-fakes.sh",
    }
    text = SETUP.read_text()
    assert "export FLEETMEDIC_KUBELET_SKIP=1" in text  # 30-kube.sh without the kubelet node
    demo_py = (ROOT / "tests" / "harness" / "demo.py").read_text()
    for part in ("loki", "mesh", "kubelet", "agent_daemonset", "bmc", "cloud"):
        assert f"tests.harness.{part}" not in demo_py, f"the demo uses {part}: build it"


def test_an_unknown_target_is_refused_before_anything_runs(tmp_path):
    p = subprocess.run(["bash", str(SETUP), "everything"], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.startswith("usage: setup.sh [demo|test]")


def test_the_demo_extra_is_in_the_test_extra():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert "aiosmtpd" in " ".join(extras["demo"])
    assert any("demo" in d for d in extras["test"] if d.startswith("fleetmedic["))
