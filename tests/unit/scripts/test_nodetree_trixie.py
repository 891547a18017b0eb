"""scripts/setup.d/24-nodetree-trixie.sh builds the Debian 13 tree for Slurm 24.11 as
20-nodetree.sh builds the Debian 12 one: the same node preparation (what the fleet harness
expects of every node: no host keys, an empty machine id, sshd's settings, the units
masked, the fake GPU tools' links), kept apart from the Debian 12 tree's cache."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
STEPS = ROOT / "scripts" / "setup.d"
DEBIAN12 = (STEPS / "20-nodetree.sh").read_text()
DEBIAN13 = (STEPS / "24-nodetree-trixie.sh").read_text()


def prep(text: str) -> list[str]:
    """The node preparation: from removing the host keys to the fake tools' links."""
    lines = [ln.strip() for ln in text.splitlines()]
    start = lines.index('rm -f "$r"/etc/ssh/ssh_host_*')
    end = next(i for i, ln in enumerate(lines) if ln.startswith("for u in amd-smi"))
    return [ln for ln in lines[start : end + 1] if ln and not ln.startswith("#")]


def test_the_debian13_nodes_are_prepared_line_for_line_as_the_debian12_ones():
    twelve, thirteen = prep(DEBIAN12), prep(DEBIAN13)
    assert thirteen == twelve


def test_the_packages_are_the_debian12_nodes_and_slurm_24_11():
    def packages(text: str) -> list[str]:
        m = re.search(r"^PACKAGES=\((.*?)\)", text, re.S | re.M)
        assert m
        return m.group(1).split()

    slurm = ["slurmd", "slurm-client", "slurmctld", "slurmrestd", "munge"]
    assert packages(DEBIAN13) == packages(DEBIAN12) + slurm
    assert "SUITE=trixie" in DEBIAN13


def test_its_cache_is_out_of_the_debian12_steps_prune():
    """20-nodetree.sh removes "$CACHE"/nodetree-* of other keys: this tree is elsewhere."""
    assert 'for d in "$CACHE"/nodetree-*' in DEBIAN12
    assert 'DIR="$CACHE/debian13-$KEY"' in DEBIAN13 and "nodetree-" not in DEBIAN13.split(
        "set -euo pipefail", 1
    )[1].replace("20-nodetree.sh", "").replace("22-nodetree-slurm.sh", "")


def test_print_says_how_to_build_when_it_is_not_built(tmp_path):
    p = subprocess.run(
        ["bash", str(STEPS / "24-nodetree-trixie.sh"), "--print"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "FLEETMEDIC_CACHE_DIR": str(tmp_path)},
    )
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.startswith("Debian 13 tree not built (") and "run: bash " in p.stderr
