"""The agent's read of its node through the Slurm library (adapters/slurmlib.py), against
real slurmctld on every release: each node as ``sinfo -n`` reads it, field by field, in
the states a fence decides on; the boot time as the whole read has it; what the library
cannot read exactly (a reason of two lines, an unknown node) through ``sinfo -n``; and the
child process as the crash boundary (killed, or a library that does not load).

On a tree's release the child runs under that tree's Python, chrooted, with that tree's
library: as on a node of that Debian release."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetmedic.adapters import slurmlib
from fleetmedic.adapters.slurm import Slurm, SlurmNode
from fleetmedic.errors import NotFoundError, TemporaryError

pytestmark = [pytest.mark.slurm_contract]
OURS = "fleetmedic: reboot: xid.79 0000:3b:00: GPU has fallen off the bus."
PID = re.compile(r"\(pid (\d+);")


def library_reader(slurm, tmp_path: Path, library: str | None = None):
    """``(reader, through_library, with_sinfo)``: two adapters on the test's cluster, one
    reading through a :class:`~fleetmedic.adapters.slurmlib.LibraryReader`."""
    python = sys.executable
    if slurm.root is None:
        found = slurmlib.library_of()
    else:  # the tree's library, and its Python, chrooted (the checkout is at its own path)
        ldd = subprocess.run(
            slurm.root.argv("ldd", "/usr/bin/sinfo"), capture_output=True, text=True, check=True
        )
        found = slurmlib.library_in(ldd.stdout)
        python = str(tmp_path / "tree-python")
        Path(python).write_text(f'#!/bin/sh\nexec chroot {slurm.root.merged} python3 "$@"\n')
        os.chmod(python, 0o755)
    assert found, "no Slurm library linked by this release's sinfo"
    lib_side = Slurm(str(slurm.conf), bin_dir=slurm.bin_dir)
    reader = slurmlib.LibraryReader(library or found, lib_side.env, 30.0, python=python)
    lib_side.use_reader(reader)
    return reader, lib_side, Slurm(str(slurm.conf), bin_dir=slurm.bin_dir)


def same(a: SlurmNode, b: SlurmNode) -> dict:
    """The fields in which two reads of a node differ, but the partitions (the library's
    read has none), the boot time (sinfo -n has none) and which base state of a node in
    service it is (24.11's sinfo -n says mixed where the library says allocated, for a
    node running a one-CPU job: measured; nothing decides on it, adapters/slurmread.py)."""
    x, y = dataclasses.asdict(a), dataclasses.asdict(b)
    for d in (x, y):
        d["state"] = "in service" if d["state"] in IN_SERVICE else d["state"]
    return {k: (x[k], y[k]) for k in x if k not in ("partitions", "boot_time") and x[k] != y[k]}


IN_SERVICE = ("idle", "mixed", "allocated", "completing")


@pytest.fixture
def reset(slurm):
    yield
    slurm.reset_nodes()


def test_the_library_reads_each_node_as_sinfo_does(slurm, tmp_path, reset):
    """n1 drained by us with a record, n2 down by someone else, n3 running a job."""
    run = slurm.run
    run("scontrol", "update", "nodename=n1", "state=drain", f"reason={OURS}")
    run("scontrol", "update", "nodename=n1", 'extra={"fleetmedic":{"phase":"reboot"}}')
    run("scontrol", "update", "nodename=n1", "comment=rack 12, row B")
    run("scontrol", "update", "nodename=n2", "state=down", "reason=NHC: ib0 down [x@1]")
    job = run("sbatch", "--parsable", "-w", "n3", "-o", "/dev/null", "--wrap", "sleep 300")
    job = job.strip()
    reader, lib_side, tools = library_reader(slurm, tmp_path)
    try:
        deadline = time.monotonic() + 60
        while run("squeue", "-h", "-j", job, "-o", "%T").strip() != "RUNNING":
            assert time.monotonic() < deadline, slurm.job_story(job)
            time.sleep(0.2)
        whole = slurm.nodes()
        for name in ("n1", "n2", "n3", "n1"):
            ours = lib_side.node(name)
            assert same(ours, tools.node(name)) == {}, name
            assert ours.boot_time == whole[name]["boot_time"], name
        n1, n2 = lib_side.node("n1"), lib_side.node("n2")
        assert (n1.drain, n1.reason, n1.reason_user) == (True, OURS, "root")
        assert n1.extra == '{"fleetmedic":{"phase":"reboot"}}' and n1.comment == "rack 12, row B"
        assert (n2.state, n2.reason) == ("down", "NHC: ib0 down [x@1]")
        # the first read was made both ways (the check), every later one by the library
        assert reader.reads == {"library": 5, "sinfo": 1} and not reader.off
        run("scancel", job)

        run("scontrol", "update", "nodename=n3", "state=drain", "reason=line one\nline two")
        assert lib_side.node("n3").reason == "line one\nline two"  # (by sinfo -n)
        with pytest.raises(NotFoundError):
            lib_side.node("n99")
        assert reader.reads == {"library": 5, "sinfo": 3} and not reader.off
    finally:
        reader.close()
        run("scancel", job, check=False)


@pytest.mark.slurm_releases("22.05", reason="the child's handling is one code on every release")
def test_a_killed_child_costs_one_read_with_sinfo_and_starts_again(slurm, tmp_path, caplog, reset):
    caplog.set_level(logging.INFO, logger="fleetmedic.adapters.slurmlib")
    slurm.run("scontrol", "update", "nodename=n1", "state=drain", f"reason={OURS}")
    reader, lib_side, _ = library_reader(slurm, tmp_path)
    try:
        assert lib_side.node("n1").reason == OURS
        first = int(PID.findall(caplog.text)[-1])
        os.kill(first, signal.SIGKILL)  # (as a segfault in the library would end it)
        assert lib_side.node("n1").reason == OURS  # this read: sinfo -n
        assert "this read with sinfo; the next starts it again" in caplog.text
        assert reader.reads == {"library": 0, "sinfo": 2}
        assert lib_side.node("n1").reason == OURS  # a new child, checked again
        second = int(PID.findall(caplog.text)[-1])
        assert second != first
        assert lib_side.node("n1").reason == OURS
        assert reader.reads == {"library": 1, "sinfo": 3} and not reader.off
    finally:
        reader.close()
    assert subprocess.run(["kill", "-0", str(second)], capture_output=True).returncode != 0


@pytest.mark.slurm_releases("22.05", reason="the child's handling is one code on every release")
def test_a_library_that_does_not_load_leaves_every_read_to_sinfo(slurm, tmp_path, caplog, reset):
    caplog.set_level(logging.INFO, logger="fleetmedic.adapters.slurmlib")
    slurm.run("scontrol", "update", "nodename=n2", "state=drain", f"reason={OURS}")
    reader, lib_side, _ = library_reader(slurm, tmp_path, library=str(tmp_path / "libslurm.so"))
    for _ in range(slurmlib.MAX_STARTS + 2):
        assert lib_side.node("n2").reason == OURS
    assert reader.reads == {"library": 0, "sinfo": slurmlib.MAX_STARTS + 2}
    assert "libslurm.so" in reader.off and f"{slurmlib.MAX_STARTS} times in a row" in reader.off
    assert caplog.text.count("reading Slurm nodes with sinfo from now on") == 1


@pytest.mark.slurm_releases("22.05", reason="the child's handling is one code on every release")
def test_an_unreachable_slurmctld_is_said_once_and_the_child_reads_again_after(
    slurm_factory, tmp_path
):
    cluster = slurm_factory(nodes=1)
    reader, lib_side, _ = library_reader(cluster, tmp_path)
    try:
        assert lib_side.node("n1").name == "n1"  # (the child started and checked)
        cluster.stop_proc("slurmctld")
        t0 = time.monotonic()
        with pytest.raises(TemporaryError, match="libslurm read of n1: "):
            lib_side.node("n1")
        took = time.monotonic() - t0
        # the library's own answer, not sinfo's after it: the library stays on
        assert reader.reads == {"library": 0, "sinfo": 1} and not reader.off, reader.reads
        print(f"an unreachable slurmctld said by the library in {took:.1f} s")
        # slurmctld back (same state): the same child reads again, not checked again
        cluster.start_ctld()
        cluster.wait_ready()
        assert lib_side.node("n1").name == "n1"
        assert reader.reads == {"library": 1, "sinfo": 1} and not reader.off, reader.reads
    finally:
        reader.close()
