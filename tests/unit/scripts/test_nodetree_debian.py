"""scripts/setup.d/24-nodetree-debian.sh builds a Debian tree per Slurm release of
scripts/slurm-releases.toml (24.11: trixie, 26.05: forky) as 20-nodetree.sh builds the
Debian 12 one: the same node preparation (what the fleet harness expects of every node: no
host keys, an empty machine id, sshd's settings, the units masked, the fake GPU tools'
links), kept apart from the Debian 12 tree's cache; the release table is the one place a
new release is added."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
STEPS = ROOT / "scripts" / "setup.d"
DEBIAN12 = (STEPS / "20-nodetree.sh").read_text()
TREES = (STEPS / "24-nodetree-debian.sh").read_text()


def prep(text: str) -> list[str]:
    """The node preparation: from removing the host keys to the fake tools' links."""
    lines = [ln.strip() for ln in text.splitlines()]
    start = lines.index('rm -f "$r"/etc/ssh/ssh_host_*')
    end = next(i for i, ln in enumerate(lines) if ln.startswith("for u in amd-smi"))
    return [ln for ln in lines[start : end + 1] if ln and not ln.startswith("#")]


def test_the_trees_nodes_are_prepared_line_for_line_as_the_debian12_ones():
    assert prep(TREES) == prep(DEBIAN12)


def test_the_packages_are_the_debian12_nodes_and_slurm():
    def packages(text: str) -> list[str]:
        m = re.search(r"^PACKAGES=\((.*?)\)", text, re.S | re.M)
        assert m
        return m.group(1).split()

    slurm = ["slurmd", "slurm-client", "slurmctld", "slurmrestd", "munge"]
    assert packages(TREES) == packages(DEBIAN12) + slurm


def test_the_releases_table_names_each_trees_suite_once():
    with open(ROOT / "scripts" / "slurm-releases.toml", "rb") as f:
        table = tomllib.load(f)["release"]
    trees = {r["slurm"]: (r["suite"], r["debian"]) for r in table if r.get("suite")}
    assert trees == {"24.11": ("trixie", 13), "26.05": ("forky", 14)}
    assert [r["slurm"] for r in table if not r.get("suite")] == ["22.05"]  # the host's


def test_their_caches_are_out_of_the_debian12_steps_prune():
    """20-nodetree.sh removes "$CACHE"/nodetree-* of other keys: these trees are elsewhere,
    one directory name per Debian release, pruned per release."""
    assert 'for d in "$CACHE"/nodetree-*' in DEBIAN12
    assert 'DIR="$CACHE/debian$NUM-$KEY"' in TREES
    assert 'for d in "$CACHE"/debian"$NUM"-* "$DIR"/venv-*' in TREES
    assert "nodetree-" not in TREES.split("set -euo pipefail", 1)[1].replace(
        "20-nodetree.sh", ""
    ).replace("22-nodetree-slurm.sh", "")


def _print(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(STEPS / "24-nodetree-debian.sh"), "--print", *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "FLEETMEDIC_CACHE_DIR": str(tmp_path)},
    )


def test_print_says_how_to_build_a_release_that_is_not_built(tmp_path):
    for release, debian in (("24.11", 13), ("26.05", 14)):
        p = _print(tmp_path, release)
        assert p.returncode == 1 and p.stdout == ""
        assert p.stderr.startswith(f"Debian {debian} tree of Slurm {release} not built (")
        assert f"{tmp_path}/debian{debian}-" in p.stderr
        assert p.stderr.rstrip().endswith(f"24-nodetree-debian.sh {release}")


def test_a_release_without_a_tree_is_one_line(tmp_path):
    p = _print(tmp_path, "22.05")
    assert p.returncode == 1 and p.stdout == ""
    assert "Slurm 22.05 has no Debian tree" in p.stderr and "24.11 26.05" in p.stderr
    p = _print(tmp_path)
    assert p.returncode == 1 and "usage:" in p.stderr


def test_each_release_has_its_own_key():
    """The suite is in the key: two releases never share a tree even with one script."""
    keys = {}
    for release in ("24.11", "26.05"):
        p = subprocess.run(
            ["bash", str(STEPS / "24-nodetree-debian.sh"), "--print", release],
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", "FLEETMEDIC_CACHE_DIR": "/nonexistent"},
        )
        keys[release] = re.search(r"debian\d+-([0-9a-f]{12})", p.stderr).group(1)
    assert keys["24.11"] != keys["26.05"]
