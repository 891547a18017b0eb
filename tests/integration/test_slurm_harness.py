"""The Slurm test cluster itself (tests/harness/slurm.py): real daemons, one address per
slurmd, a state that survives a slurmctld crash once saved, and nothing left behind."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from tests.harness import fleet_net as net
from tests.harness import slurm as slurm_harness
from tests.harness import slurm24
from tests.harness.slurm import SLURMD_PORT


def test_each_slurmd_registers_from_its_own_address(slurm):
    nodes = slurm.nodes()
    assert sorted(nodes) == ["n1", "n2", "n3"]
    for name, n in nodes.items():
        assert n["state"] == "idle", n
        assert n["address"] == slurm.node_address(name)
        assert n["port"] == SLURMD_PORT
        assert n["slurmd_version"] == {"22.05": "22.05.8", "24.11": "24.11.5"}[slurm.version]
        # the slurmd really listens in the node's own namespace, which has the address
        ns = slurm.netns(name)
        ss = subprocess.run(
            ["ip", "netns", "exec", ns, "ss", "-Hltn"], capture_output=True, text=True, check=True
        ).stdout
        assert f":{SLURMD_PORT} " in ss
        assert f"inet {slurm.node_address(name)}/24" in net.ip("-n", ns, "addr").stdout


def test_a_killed_slurmd_started_again_registers_again(slurm_factory):
    c = slurm_factory(nodes=2)
    c.stop_proc("slurmd-n2", kill=True)
    c.start_slurmd("n2")
    c.wait_ready(timeout=90)
    assert c.nodes()["n2"]["state"] == "idle"


def test_a_saved_drain_survives_a_slurmctld_sigkill(slurm_factory):
    c = slurm_factory(nodes=2)
    reason = f"harness-check {time.time_ns()}"
    c.run("scontrol", "update", "nodename=n1", "state=drain", f"reason={reason}")
    c.wait_saved(reason)
    old = c.daemons["slurmctld"].popen.pid
    took = c.restart_ctld(kill=True)
    assert c.daemons["slurmctld"].popen.pid != old
    n1 = c.nodes()["n1"]
    assert n1["reason"] == reason and "DRAIN" in n1["state_flags"]
    assert took < 90


def test_a_drain_with_a_reason_the_node_had_before_survives_a_sigkill_after_save_barrier(
    slurm_factory,
):
    """Issue 38: 24.11 keeps a resumed node's last reason in node_state, so the text of a
    reason the node had before is no sign that a new drain with it was saved: wait_saved
    would return at once (the crash-window test lost its drain so, once). save_barrier
    waits for a fresh mark, and so for every update before it, on both releases."""
    c = slurm_factory(nodes=1)
    reason = f"harness-check {time.time_ns()}"
    c.run("scontrol", "update", "nodename=n1", "state=drain", f"reason={reason}")
    c.wait_saved(reason)
    c.run("scontrol", "update", "nodename=n1", "state=resume")
    c.save_barrier()
    kept = reason.encode() in (c.state_dir / "node_state").read_bytes()
    assert kept == (c.version != "22.05"), "the resumed node's reason in node_state"
    # (save_barrier just saved: slurmctld puts the next save off for up to 5 s)
    c.run("scontrol", "update", "nodename=n1", "state=drain", f"reason={reason}", "extra=again")
    c.save_barrier()
    c.restart_ctld(kill=True)
    n1 = c.nodes()["n1"]
    assert "DRAIN" in n1["state_flags"] and n1["extra"] == "again", n1


def test_stop_leaves_no_namespace_link_or_process(slurm_factory):
    c = slurm_factory(nodes=2)
    pids = [p.popen.pid for p in c.daemons.values()]
    names = {c.netns("n1"), c.netns("n2"), f"fmsb{c.octet}", f"fmsl{c.octet}v1"}
    c.stop()
    with slurm_harness.lock():  # another worker may take the freed subnet right away
        others = set()
        for d in slurm_harness.SLURM_ROOT.iterdir():
            rec = slurm_harness.read_record(d)
            if rec and slurm_harness.live(rec):
                others |= set(rec["netns"]) | set(rec["links"])
        left = names & (set(net.list_netns()) | set(net.list_links()))
        assert left <= others
    for pid in pids:
        assert subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode != 0


def test_nodes_have_gpu_gres_and_a_gpu_job_gets_its_devices(slurm, tmp_path):
    assert all(n["gres"] == "gpu:2" for n in slurm.nodes().values())
    out = tmp_path / "job.out"
    job = slurm.run(
        "sbatch",
        "--parsable",
        "--gres=gpu:2",
        "-w",
        "n1",
        "-o",
        str(out),
        "--wrap",
        "echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES",
    ).strip()
    deadline = time.monotonic() + 60
    while not (out.exists() and out.read_text().strip()):
        assert time.monotonic() < deadline, f"job {job} did not run"
        time.sleep(0.2)
    assert out.read_text().split() == ["n1", "0,1"]


def test_a_slurmctld_port_taken_after_the_pick_gets_another(monkeypatch, slurm_factory):
    from tests.harness import procs

    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        picks = iter([taken])
        real = procs.free_port
        monkeypatch.setattr(
            procs, "free_port", lambda host="127.0.0.1": next(picks, None) or real(host)
        )
        c = slurm_factory(nodes=1)
    assert c.ctld_port != taken
    assert "Address already in use" in (c.dir / "slurmctld.log").read_text()
    assert c.nodes()["n1"]["state"] == "idle"


def test_a_cut_link_makes_the_node_not_responding_and_mending_it_brings_it_back(
    slurm_factory,
):
    c = slurm_factory(nodes=2, slurmd_timeout=10)
    c.set_link("n2", up=False)
    deadline = time.monotonic() + 120
    while "NOT_RESPONDING" not in c.nodes()["n2"]["state_flags"]:
        assert time.monotonic() < deadline, "n2 never marked not responding"
        time.sleep(0.5)
    assert "NOT_RESPONDING" not in c.nodes()["n1"]["state_flags"]
    c.set_link("n2", up=True)
    c.wait_ready(timeout=120)


def test_a_tree_root_an_earlier_checkout_at_this_path_left_is_mounted_again(monkeypatch):
    """CI clones main to one path on a machine whose /run keeps the last run's root of a
    tree's release (24.11): that root's binds show the deleted checkout, where the tree's
    fleetmedic found no package and every prolog failed (CI, twice). shared_root() mounts
    such a root again over the checkout that is there now."""
    checkout = Path("/run/fleetmedic") / f"slurm24-test-checkout-{os.getpid()}"
    shutil.rmtree(checkout, ignore_errors=True)

    def clone(mark: str) -> None:
        (checkout / "controller").mkdir(parents=True)
        (checkout / "controller" / "mark").write_text(mark)

    clone("first")
    monkeypatch.setattr(slurm24.fl, "ROOT", checkout)  # the key and the binds are its
    root = slurm24.shared_root("24.11")
    src = root.merged / "opt" / "fleetmedic" / "src"
    try:
        assert root.current() and (src / "mark").read_text() == "first"
        shutil.rmtree(checkout)
        clone("second")  # the same path, a new directory
        assert root.mounted and not root.current()
        assert not (src / "mark").exists()  # what the tree's fleetmedic saw in CI
        again = slurm24.shared_root("24.11")
        assert again.dir == root.dir and again.current()
        assert (src / "mark").read_text() == "second"
    finally:
        slurm24.unmount_root(root.dir)  # (raises while anything is still mounted there)
        shutil.rmtree(root.dir)
        shutil.rmtree(checkout)
