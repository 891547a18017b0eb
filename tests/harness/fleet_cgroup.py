"""Own cgroups for a fleet node, in every cgroup v1 controller hierarchy.

A node that runs a kubelet creates ``kubepods/...`` at the root of what it sees. nspawn
gives the node a cgroup namespace rooted at the cgroup nspawn was started in, so nodes
started from one process would share that root (and two kubelets would fight over one
``kubepods``). Each such node is therefore started from its own cgroup below ours in
every controller hierarchy (``name=systemd`` is nspawn's own business):
``<our cgroup>/fleetmedic-<fleet>-<node>``.

This machine has cgroup v1 only (the v2 mount has no controllers, FACTS.md).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

_ROOT = Path("/sys/fs/cgroup")


def _hierarchies() -> dict[str, Path]:
    """Controller name (``cpu,cpuacct`` style key) -> our own cgroup directory in it."""
    ours = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers and not controllers.startswith("name="):
            ours[controllers] = path
    mounts = {}
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, mountpoint, fstype, options, *_ = line.split()
        if fstype != "cgroup":
            continue
        ctrls = [o for o in options.split(",") if o in _known(ours)]
        key = ",".join(sorted(ctrls))
        for k, path in ours.items():
            if sorted(k.split(",")) == ctrls:
                mounts[key] = Path(mountpoint) / path.lstrip("/")
    return mounts


def _known(ours: dict[str, str]) -> set[str]:
    return {c for k in ours for c in k.split(",")}


def create(name: str) -> list[str]:
    """Make ``name`` below our cgroup in each controller hierarchy; returns the paths."""
    made = []
    for key, base in _hierarchies().items():
        d = base / name
        d.mkdir(exist_ok=True)
        if "cpuset" in key.split(","):  # an empty cpuset refuses every task
            for f in ("cpuset.cpus", "cpuset.mems"):
                (d / f).write_text((base / f).read_text())
        made.append(str(d))
    return made


def join(paths: list[str]) -> None:
    """Move the calling process into ``paths`` (from a ``preexec_fn``: only os calls)."""
    pid = str(os.getpid()).encode()
    for p in paths:
        fd = os.open(os.path.join(p, "cgroup.procs"), os.O_WRONLY)
        try:
            os.write(fd, pid)
        finally:
            os.close(fd)


def remove(paths: list[str], timeout: float = 10.0) -> list[str]:
    """Kill what is left in ``paths`` (and below) and remove them, deepest first.
    Returns the directories that could not be removed."""
    dirs: list[Path] = []
    for p in paths:
        if Path(p).is_dir():
            dirs += [Path(d) for d, _, _ in os.walk(p)]
    dirs.sort(key=lambda d: len(d.parts), reverse=True)
    deadline = time.monotonic() + timeout
    left = []
    for d in dirs:
        while True:
            try:
                pids = [int(x) for x in (d / "cgroup.procs").read_text().split()]
            except OSError:
                pids = []
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    left.append(str(d))
                    break
                time.sleep(0.05)
    return left
