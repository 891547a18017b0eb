"""Slurm 24.11 for the test clusters: Debian 13's daemons and client tools, run from the
Debian 13 node tree on this Debian 12 host.

    root = shared_root()                  # mounted once per tree, for every 24.11 cluster
    root.argv("slurmctld", "-D", ...)     # ["chroot", <merged>, "slurmctld", "-D", ...]
    root.bin_dir                          # sinfo, scontrol, ... that run the tree's
    normalize(json_node)                  # a 24.11 node in 22.05's sinfo --json fields

The tree (scripts/setup.d/24-nodetree-trixie.sh) has its own libc and Slurm; the host
keeps Debian 12's. Every 24.11 process of the test clusters (munged, slurmctld, slurmd,
the client tools) runs chrooted into one overlay of the tree,
``/run/fleetmedic/slurm24/<key>/merged`` (the tree read-only below, one writable layer
above), in which the clusters' directory (/run/fleetmedic/slurm), /tmp (tests' scripts and
job files), this checkout (read-only: the fake GPU libraries) and the host's /etc/hosts
appear at their own paths, with /proc, /sys (slurmd reads cgroups and the topology there)
and /dev. The checkout's ``controller`` is also at /opt/fleetmedic/src, where the tree's
``/usr/local/bin/fleetmedic`` (:data:`FLEETMEDIC`, Python 3.13) finds it: what a prolog
or health check that slurmd runs starts, as on a Debian 13 node. So slurm.conf's paths,
the munge sockets and the GPU device files are the same inside and out, and a client
tool runs as ``chroot <merged> <tool>``: the wrappers in :attr:`Root.bin_dir`, which a
test puts first on PATH (as a bastion with Slurm 24.11 installed has them; the fixtures
do it for every test of the 24.11 parameter) or hands to ``Slurm(bin_dir=...)``. Each
cluster keeps its own files in its own directory, as on the host; the root is shared so
that one PATH reaches every 24.11 cluster, and it stays mounted (``python -m
tests.harness.slurm cleanup`` unmounts it when no 24.11 cluster lives).

/sys is a recursive bind made a slave at once, so an unmount there never propagates to the
host's. :func:`unmount_root` unmounts everything and checks before anything below the
root may be removed: a ``rmtree`` through its bound /tmp would empty the host's.

A cluster of this version is otherwise the 22.05 cluster of tests/harness/slurm.py: the
same slurm.conf (24.11 takes it unchanged), munged (0.5.16, the tree's) with its own key,
slurmctld on a free port, slurmd per node in a network namespace or inside fleet nodes
booted from the same tree (tests/harness/slurmfleet.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.harness import fleet as fl
from tests.harness import procs
from tests.harness.fleet_sys import mounts_under, umount_all

VERSIONS = ("22.05", "24.11")
"""The Slurm releases the tests run against: Debian 12's on the host, Debian 13's from its
node tree."""
TREE_SCRIPT = fl.ROOT / "scripts" / "setup.d" / "24-nodetree-trixie.sh"
CLUSTERS = Path(os.environ.get("FLEETMEDIC_SLURM", "/run/fleetmedic/slurm"))  # slurm.SLURM_ROOT
FLEETMEDIC = "/usr/local/bin/fleetmedic"  # the tree's, on its own Python
ROOTS = CLUSTERS.parent / "slurm24"
CLIENT_TOOLS = (
    "sacct",
    "salloc",
    "sbatch",
    "scancel",
    "scontrol",
    "sdiag",
    "sinfo",
    "sprio",
    "squeue",
    "srun",
    "sshare",
    "sstat",
)


class Slurm24Error(RuntimeError):
    """The 24.11 tree is missing or its root cannot be mounted. One line."""


def tree_lowerdir() -> str:
    """The Debian 13 tree's overlay lowerdir (venv layer, rootfs), built first if
    this checkout's key has none (once, minutes; concurrent callers wait on its lock)."""
    p = subprocess.run(["bash", str(TREE_SCRIPT), "--print"], capture_output=True, text=True)
    if p.returncode != 0:
        b = subprocess.run(
            ["bash", str(TREE_SCRIPT)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        if b.returncode != 0:
            raise Slurm24Error(
                f"building the Debian 13 node tree failed: {fl.net.one_line(b.stderr)[-400:]}"
            )
        p = subprocess.run(["bash", str(TREE_SCRIPT), "--print"], capture_output=True, text=True)
        if p.returncode != 0:
            raise Slurm24Error((p.stderr.strip().splitlines() or ["tree not built"])[-1])
    return p.stdout.strip()


def _run(*argv: str) -> None:
    p = subprocess.run(list(argv), capture_output=True, text=True)
    if p.returncode:
        raise Slurm24Error(f"{' '.join(argv)}: {fl.net.one_line(p.stderr)}")


class Root:
    """The chroot of the 24.11 processes (see the module doc), at ``dir``."""

    def __init__(self, dir: Path) -> None:
        self.dir = dir
        self.merged = dir / "merged"
        self.bin_dir = dir / "bin"

    def argv(self, tool: str, *args: str) -> list[str]:
        return ["chroot", str(self.merged), tool, *args]

    @property
    def mounted(self) -> bool:
        return str(self.merged) in mounts_under(self.merged)

    def mount(self, lower: str) -> None:
        for sub in ("upper", "work", "merged"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        m = self.merged
        try:
            _run(
                "mount", "-t", "overlay", "overlay", "-o",
                f"lowerdir={lower},upperdir={self.dir / 'upper'},workdir={self.dir / 'work'}",
                str(m),
            )  # fmt: skip
            for path in (CLUSTERS, Path("/tmp")):
                path.mkdir(parents=True, exist_ok=True)
                inside = m / str(path).lstrip("/")
                inside.mkdir(parents=True, exist_ok=True)
                _run("mount", "--bind", str(path), str(inside))
                _run("mount", "--make-private", str(inside))
            for path, inside, ro in (
                (fl.ROOT, m / str(fl.ROOT).lstrip("/"), True),
                # writable: Python 3.13 keeps its bytecode beside the sources (see shared())
                (fl.ROOT / "controller", m / "opt" / "fleetmedic" / "src", False),
            ):
                inside.mkdir(parents=True, exist_ok=True)
                _run("mount", "--bind", str(path), str(inside))
                if ro:
                    _run("mount", "-o", "remount,bind,ro", str(inside))
                _run("mount", "--make-private", str(inside))
            hosts = m / "etc" / "hosts"
            hosts.touch()
            _run("mount", "--bind", "-o", "ro", "/etc/hosts", str(hosts))
            _run("mount", "-t", "proc", "proc", str(m / "proc"))
            _run("mount", "--rbind", "/sys", str(m / "sys"))
            _run("mount", "--make-rslave", str(m / "sys"))
            _run("mount", "--bind", "/dev", str(m / "dev"))
            _run("mount", "--make-private", str(m / "dev"))
        except Slurm24Error:
            unmount_root(self.dir)
            raise
        self.bin_dir.mkdir(exist_ok=True)
        for tool in CLIENT_TOOLS:
            w = self.bin_dir / tool
            w.write_text(f'#!/bin/sh\nexec chroot {m} /usr/bin/{tool} "$@"\n')
            w.chmod(0o755)


def shared_root() -> Root:
    """The 24.11 root of this checkout and its tree, mounted on first use (under a lock:
    every test worker of the checkout shares it)."""
    lower = tree_lowerdir()
    key = hashlib.sha256(f"{lower}\n{fl.ROOT}".encode()).hexdigest()[:12]  # (per checkout)
    root = Root(ROOTS / key)
    with procs.exclusive(ROOTS, "slurm24.lock"):
        if not root.mounted:
            unmount_root(root.dir)  # (a half-made one from a crash)
            root.mount(lower)
    return root


_shared: Root | None = None


def shared() -> Root:
    """:func:`shared_root`, looked up once per process, which also compiles this checkout's
    fleetmedic for the tree's Python 3.13 (once per process; a no-op when nothing changed).
    The checkout's bytecode is the host's 3.11: without 3.13's beside it, every fleetmedic
    run in the tree (a prolog, an agent in a 24.11 fleet node, which binds the sources
    read-only) compiles the whole package first, 20-40 s on a loaded 2-CPU machine."""
    global _shared
    if _shared is None or not _shared.mounted:
        _shared = shared_root()
        subprocess.run(
            _shared.argv("/opt/fleetmedic/venv/bin/python", "-m", "compileall", "-q",
                         "/opt/fleetmedic/src"),
            capture_output=True,
        )  # fmt: skip
    return _shared


def unmount_all_roots() -> list[str]:
    """Unmount every 24.11 root (no 24.11 cluster may live: the caller checks)."""
    done = []
    for d in sorted(ROOTS.glob("*")) if ROOTS.exists() else ():
        if d.is_dir() and mounts_under(d):
            unmount_root(d)
            done.append(f"24.11 root {d}")
    return done


def unmount_root(root_dir: Path) -> None:
    umount_all(root_dir)
    left = mounts_under(root_dir)
    if left:
        raise Slurm24Error(f"still mounted under {root_dir}: {', '.join(left[:3])}")


def normalize(node: dict[str, Any]) -> dict[str, Any]:
    """A node of 24.11's ``scontrol show node --json`` with 22.05's ``sinfo --json``
    fields, for the harness and the tests (written here, not taken from fleetmedic's
    parser, so the tests do not check the product with itself): the state list split into
    ``state`` (the base state, lower case) and ``state_flags``, the set/infinite/number
    objects unwrapped to integers (0 when unset), and the reason 24.11 keeps on a node
    it resumed (22.05 clears it; measured: ``state=resume`` leaves the old reason on the
    idle node) left out while the node is in service, as 22.05 shows it."""
    out = {k: _unwrap(v) for k, v in node.items()}
    words = list(node.get("state") or [])
    out["state"] = words[0].lower() if words else ""
    out["state_flags"] = words[1:]
    out["slurmd_version"] = node.get("version", "")
    serving = out["state"] in ("idle", "allocated", "mixed", "completing")
    if serving and not {"DRAIN", "FAIL", "REBOOT_REQUESTED", "REBOOT_ISSUED"} & set(words):
        out.update(reason="", reason_set_by_user="", reason_changed_at=0)
    return out


def _unwrap(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"set", "infinite", "number"}:
        return value["number"] if value["set"] and not value["infinite"] else 0
    return value


def nodes(run_json: str) -> dict[str, dict[str, Any]]:
    """``scontrol show node --json``'s answer as normalized nodes by name."""
    return {n["name"]: normalize(n) for n in json.loads(run_json)["nodes"]}
