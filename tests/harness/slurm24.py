"""Slurm 24.11 and 26.05 for the test clusters: a Debian release's daemons and client
tools, run from that release's node tree on this Debian 12 host.

    root = shared("26.05")                # mounted once per tree, for every 26.05 cluster
    root.argv("slurmctld", "-D", ...)     # ["chroot", <merged>, "slurmctld", "-D", ...]
    root.bin_dir                          # sinfo, scontrol, ... that run the tree's
    normalize(json_node)                  # a 24.11/26.05 node in 22.05's sinfo --json fields

The releases are :data:`RELEASES`, read from scripts/slurm-releases.toml (the one table a
new release touches): 22.05 is the host's, every other one names the Debian suite whose
slurm-wlm it is (24.11: trixie, Debian 13; 26.05: forky, Debian 14), and
scripts/setup.d/24-nodetree-debian.sh builds that suite's tree. Each tree has its own
libc and Slurm; the host keeps Debian 12's. Every process of a tree's release in the test
clusters (munged, slurmctld, slurmd, the client tools) runs chrooted into one overlay of
its tree, ``/run/fleetmedic/slurm24/<key>/merged`` (the tree read-only below, one
writable layer above; the key names the tree and the checkout), in which the clusters'
directory (/run/fleetmedic/slurm), /tmp (tests' scripts and job files), this checkout
(read-only: the fake GPU libraries) and the host's /etc/hosts appear at their own paths,
with /proc, /sys (slurmd reads cgroups and the topology there) and /dev. The checkout's
``controller`` is also at /opt/fleetmedic/src, where the tree's
``/usr/local/bin/fleetmedic`` (:data:`FLEETMEDIC`, the tree's Python) finds it: what a
prolog or health check that slurmd runs starts, as on a node of that Debian release. So
slurm.conf's paths, the munge sockets and the GPU device files are the same inside and
out, and a client tool runs as ``chroot <merged> <tool>``: the wrappers in
:attr:`Root.bin_dir`, which a test puts first on PATH (as a bastion with that release
installed has them; the fixtures do it for every test of the release's parameter) or
hands to ``Slurm(bin_dir=...)``. Each cluster keeps its own files in its own directory,
as on the host; a release's root is shared so that one PATH reaches every cluster of it,
and it stays mounted (``python -m tests.harness.slurm cleanup`` unmounts the roots when
no cluster of a tree's release lives), across runs too: /run outlives them, and CI runs
on the same machine from a checkout cloned again at one path (``/check/work/main``), so
:func:`shared_root` mounts a root again when its binds show a directory that is no
longer this checkout's (:meth:`Root.current`).

/sys is a recursive bind made a slave at once, so an unmount there never propagates to the
host's. :func:`unmount_root` unmounts everything and checks before anything below the
root may be removed: a ``rmtree`` through its bound /tmp would empty the host's.

A cluster of such a release is otherwise the 22.05 cluster of tests/harness/slurm.py: the
same slurm.conf (24.11 and 26.05 take it unchanged), munged (the tree's) with its own key,
slurmctld on a free port, slurmd per node in a network namespace or inside fleet nodes
booted from the same tree (tests/harness/slurmfleet.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.harness import fleet as fl
from tests.harness import procs
from tests.harness.fleet_sys import mounts_under, umount_all

HOST_RELEASE = "22.05"  # Debian 12's, installed on the host (scripts/setup.d/36-slurm.apt)


@dataclass(frozen=True)
class Release:
    """One entry of scripts/slurm-releases.toml."""

    version: str
    debian: int
    suite: str = ""  # "": the host's Slurm
    contract_only: bool = False  # only the tests marked slurm_contract run on it
    unified_cgroup: bool = False  # its fleet nodes boot with a cgroup v2 hierarchy


def _releases() -> tuple[Release, ...]:
    with open(fl.ROOT / "scripts" / "slurm-releases.toml", "rb") as f:
        table = tomllib.load(f)["release"]
    return tuple(
        Release(
            r["slurm"],
            r["debian"],
            r.get("suite", ""),
            r.get("contract_only", False),
            r.get("unified_cgroup", False),
        )
        for r in table
    )


RELEASES = _releases()
VERSIONS = tuple(r.version for r in RELEASES)
"""The Slurm releases the tests run against: Debian 12's on the host (22.05), the others
from their Debian trees."""
NSPAWN_UNIFIED = {"SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"}
"""nspawn's switch for a container of its own cgroup v2 hierarchy, for a release whose
tree's systemd refuses the host's v1 one (``unified_cgroup``; see the table)."""
TREE_SCRIPT = fl.ROOT / "scripts" / "setup.d" / "24-nodetree-debian.sh"
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
    """A release's tree is missing or its root cannot be mounted. One line."""


def release(version: str) -> Release:
    for r in RELEASES:
        if r.version == version:
            return r
    raise Slurm24Error(f"Slurm {version}: the test clusters run {', '.join(VERSIONS)}")


def tree_lowerdir(version: str = "24.11") -> str:
    """The overlay lowerdir (venv layer, rootfs) of the Debian tree of Slurm ``version``,
    built first if this checkout's key has none (once, minutes; concurrent callers wait
    on its lock)."""
    r = release(version)
    if not r.suite:
        raise Slurm24Error(f"Slurm {version} is the host's: it has no node tree")
    print_argv = ["bash", str(TREE_SCRIPT), "--print", version]
    p = subprocess.run(print_argv, capture_output=True, text=True)
    if p.returncode != 0:
        b = subprocess.run(
            ["bash", str(TREE_SCRIPT), version],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        if b.returncode != 0:
            raise Slurm24Error(
                f"building the Debian {r.debian} node tree failed: "
                f"{fl.net.one_line(b.stderr)[-400:]}"
            )
        p = subprocess.run(print_argv, capture_output=True, text=True)
        if p.returncode != 0:
            raise Slurm24Error((p.stderr.strip().splitlines() or ["tree not built"])[-1])
    return p.stdout.strip()


def _run(*argv: str) -> None:
    p = subprocess.run(list(argv), capture_output=True, text=True)
    if p.returncode:
        raise Slurm24Error(f"{' '.join(argv)}: {fl.net.one_line(p.stderr)}")


class Root:
    """The chroot of a tree's Slurm processes (see the module doc), at ``dir``."""

    def __init__(self, dir: Path) -> None:
        self.dir = dir
        self.merged = dir / "merged"
        self.bin_dir = dir / "bin"

    def argv(self, tool: str, *args: str) -> list[str]:
        return ["chroot", str(self.merged), tool, *args]

    @property
    def mounted(self) -> bool:
        return str(self.merged) in mounts_under(self.merged)

    def binds(self) -> tuple[tuple[Path, Path, bool], ...]:
        """Each host path bound into the root: (host path, its place inside, read-only)."""
        m = self.merged
        return (
            (CLUSTERS, m / str(CLUSTERS).lstrip("/"), False),
            (Path("/tmp"), m / "tmp", False),
            (fl.ROOT, m / str(fl.ROOT).lstrip("/"), True),
            # writable: the tree's Python keeps its bytecode beside the sources (shared())
            (fl.ROOT / "controller", m / "opt" / "fleetmedic" / "src", False),
            (Path("/etc/hosts"), m / "etc" / "hosts", True),
        )

    def current(self) -> bool:
        """Whether every bind of this mounted root shows what its host path is now. A root
        outlives the run that mounted it (it is /run's, kept for the next run), and a
        checkout cloned again at the same path (as CI does) is a new directory: the old
        root's binds still show the deleted one, where the tree's fleetmedic finds no
        package (seen in CI: every prolog exited 1, "No module named fleetmedic"). The
        directories only: a host's /etc/hosts rewritten by a rename must not remount a root
        another worker's clusters run in."""
        try:
            return all(
                (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
                for a, b in (
                    (os.stat(host), os.stat(inside))
                    for host, inside, _ in self.binds()
                    if host.is_dir()
                )
            )
        except OSError:
            return False

    def mount(self, lower: str) -> None:
        """Mount the root over a fresh writable layer (call with nothing mounted under
        ``dir``: :func:`unmount_root` checks). Fresh, because a root left by a crashed run
        may have been unmounted lazily, and overlayfs refuses an upper or work directory
        another overlay still holds."""
        for sub in ("upper", "work"):
            shutil.rmtree(self.dir / sub, ignore_errors=True)
        for sub in ("upper", "work", "merged"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        m = self.merged
        try:
            _run(
                "mount", "-t", "overlay", "overlay", "-o",
                f"lowerdir={lower},upperdir={self.dir / 'upper'},workdir={self.dir / 'work'}",
                str(m),
            )  # fmt: skip
            for host, inside, ro in self.binds():
                if host.is_file():  # /etc/hosts
                    inside.touch()
                else:
                    host.mkdir(parents=True, exist_ok=True)  # (the clusters' directory)
                    inside.mkdir(parents=True, exist_ok=True)
                _run("mount", "--bind", str(host), str(inside))
                if ro:
                    _run("mount", "-o", "remount,bind,ro", str(inside))
                _run("mount", "--make-private", str(inside))
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


def shared_root(version: str = "24.11") -> Root:
    """The root of this checkout and the tree of Slurm ``version``, mounted on first use
    (under a lock: every test worker of the checkout shares it)."""
    lower = tree_lowerdir(version)
    key = hashlib.sha256(f"{lower}\n{fl.ROOT}".encode()).hexdigest()[:12]  # (per checkout)
    root = Root(ROOTS / key)
    with procs.exclusive(ROOTS, "slurm24.lock"):
        if not root.mounted or not root.current():
            unmount_root(root.dir)  # (a half-made one from a crash, or an earlier checkout's)
            root.mount(lower)
    return root


_shared: dict[str, Root] = {}


def shared(version: str = "24.11") -> Root:
    """:func:`shared_root`, looked up once per process and release, which also compiles
    this checkout's fleetmedic for the tree's Python (once per process; a no-op when
    nothing changed). The checkout's bytecode is the host's 3.11: without the tree's
    beside it, every fleetmedic run in the tree (a prolog, an agent in a fleet node booted
    from the tree, which binds the sources read-only) compiles the whole package first,
    20-40 s on a loaded 2-CPU machine."""
    root = _shared.get(version)
    if root is None or not root.mounted:
        root = _shared[version] = shared_root(version)
        subprocess.run(
            root.argv("/opt/fleetmedic/venv/bin/python", "-m", "compileall", "-q",
                      "/opt/fleetmedic/src"),
            capture_output=True,
        )  # fmt: skip
    return root


def unmount_all_roots() -> list[str]:
    """Unmount every tree's root (no cluster of a tree's release may live: the caller
    checks)."""
    done = []
    for d in sorted(ROOTS.glob("*")) if ROOTS.exists() else ():
        if d.is_dir() and mounts_under(d):
            unmount_root(d)
            done.append(f"Slurm tree root {d}")
    return done


def unmount_root(root_dir: Path) -> None:
    umount_all(root_dir)
    left = mounts_under(root_dir)
    if left:
        raise Slurm24Error(f"still mounted under {root_dir}: {', '.join(left[:3])}")


def normalize(node: dict[str, Any]) -> dict[str, Any]:
    """A node of 24.11's or 26.05's ``scontrol show node --json`` with 22.05's ``sinfo --json``
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
