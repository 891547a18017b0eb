"""Fabric Manager as an agent source (issue 39 item 3), on an in-memory Node: a fatal
error fences at the rung Fabric Manager's guidance names, a non-fatal one does not; lines
from before this boot or before the last one acted on are not acted on again; a fence
keeps the kernel log's watermark. Published line formats: leptonai/gpud's Fabric Manager
tests (fatal 20034, non-fatal 12028, the topology abort), NVSentinel issue 883 (the unit
killed)."""

from __future__ import annotations

import itertools
import threading
import time

from agent_helpers import REBOOT, VOCAB, MemoryKube, Node, xid

from fleetmedic.agent.config import FabricManagerConfig
from fleetmedic.agent.fabricwatch import FabricWatch, resolve
from fleetmedic.agent.retry import Retrier
from fleetmedic.agent.writer import NodeWriter
from fleetmedic.model import keys
from tests.unit.scan.test_scan_fabricmanager_gb200 import NMXC_FATAL

RESET = "fleetmedic.io/repair=reset"


def stamp(t: float) -> str:
    return time.strftime("%b %d %Y %H:%M:%S", time.localtime(t))


def fatal(t: float, code: int = 20034) -> str:
    return (
        f"[{stamp(t)}] [ERROR] [tid 841] detected NVSwitch fatal error {code} on fid 0 on "
        "NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 33\n"
    )


def non_fatal(t: float) -> str:
    return (
        f"[{stamp(t)}] [ERROR] [tid 12727] detected NVSwitch non-fatal error 12028 on fid 0 on "
        "NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 61\n"
    )


def topology_abort(t: float) -> str:
    return (
        f"[{stamp(t)}] [ERROR] [tid 99999] detected number of NVSwitches don't match with any "
        "supported system topology, aborting fabric manager\n"
    )


class Fabric:
    def __init__(self, tmp, kube: MemoryKube | None = None, booted: float = 1000.0):
        self.log = tmp / "fabricmanager.log"
        self.stat = tmp / "stat"
        self.stat.write_text(f"cpu  1 2 3\nbtime {int(booted)}\n")
        self.kube = kube or MemoryKube()

    def run_once(self) -> FabricWatch:
        stop = threading.Event()
        cfg = FabricManagerConfig(source=str(self.log), stat_file=str(self.stat))
        fw = FabricWatch(
            cfg, NodeWriter(self.kube, "n1", VOCAB), Retrier(stop), stop, boot="boot-a", once=True
        )
        fw.run()
        return fw

    def write(self, *lines: str) -> None:
        with open(self.log, "a") as f:
            f.writelines(lines)

    def ours(self) -> set[str]:
        return {t for t in self.kube.taints() if t.startswith("fleetmedic.io/")}


def test_a_fatal_nvswitch_error_fences_reset_and_a_non_fatal_one_does_not(tmp_path):
    now = time.time()
    fm = Fabric(tmp_path, booted=now - 3600)
    fm.write(non_fatal(now - 600))
    fm.run_once()
    assert fm.ours() == set()
    fm.write(fatal(now - 300))
    fw = fm.run_once()
    assert fm.ours() == {RESET} and fw.acted == 1
    evidence = fm.kube.ann(keys.ANN_LAST_FINDING)
    assert (evidence["rule"], evidence["src"], evidence["pci"]) == (
        "fm.nvswitch-fatal",
        "fabricmanager",
        "0000:86:00",
    )
    assert "via fabric manager" in fm.kube.events[0][2]


def test_lines_from_before_this_boot_or_already_acted_on_are_not_acted_on(tmp_path):
    now = time.time()
    fm = Fabric(tmp_path, booted=now - 3600)
    fm.write(fatal(now - 7200), topology_abort(now - 7000))  # an earlier boot: handled by it
    fm.run_once()
    assert fm.ours() == set()
    fm.write(fatal(now - 60))
    fm.run_once()
    assert fm.ours() == {RESET}
    fm.kube.node["spec"]["taints"] = []  # a human released the node without a reboot
    writes = fm.kube.writes
    fw = fm.run_once()  # a restart reads the file again: the watermark says it was handled
    assert fm.ours() == set() and fm.kube.writes == writes and fw.skipped >= 3


def test_a_topology_abort_raises_a_weaker_fence_to_reboot(tmp_path):
    now = time.time()
    fm = Fabric(tmp_path, booted=now - 3600)
    fm.write(fatal(now - 120), topology_abort(now - 60))
    fm.run_once()
    assert fm.ours() == {REBOOT}


def test_a_fabric_fence_keeps_the_kernel_logs_watermark(tmp_path):
    """Both sources write ``last-finding`` (the fence's evidence); the kernel watcher must
    still find its own place after a Fabric Manager finding fenced."""
    node = Node(tmp_path)
    node.log.write_text(xid(79, 0x3B, 100.0))
    node.run_once()
    assert node.kube.taints() >= {REBOOT}
    node.release()
    now = time.time()
    fm = Fabric(tmp_path, kube=node.kube, booted=now - 3600)
    fm.write(fatal(now - 30))
    fm.run_once()
    assert node.kube.ann(keys.ANN_LAST_FINDING)["kernel"]["rule"] == "xid.79"
    node.release()
    kw = node.run_once()  # the kernel log read again: its Xid 79 was handled before
    assert kw.skipped == 1 and not {t for t in node.kube.taints() if "repair" in t}


def test_auto_follows_the_file_only_where_fabric_manager_logs(tmp_path):
    assert resolve(FabricManagerConfig(path=str(tmp_path / "absent.log"))) == "none"
    (tmp_path / "fm.log").write_text("")
    assert resolve(FabricManagerConfig(path=str(tmp_path / "fm.log"))) == "file"
    assert resolve(FabricManagerConfig(source="journal")) == "journal"


def test_a_journal_follower_that_keeps_ending_is_started_again_after_a_rest(tmp_path, monkeypatch):
    # journalctl -f ends when journald restarts: the watch starts it again after the
    # retry's wait (1 s), not in a busy loop
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "journalctl"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$(date +%s.%N) $*" >> {calls}\nexit 0\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    fab = Fabric(tmp_path)
    stop = threading.Event()
    cfg = FabricManagerConfig(source="journal", stat_file=str(fab.stat), poll=0.05)
    fw = FabricWatch(cfg, NodeWriter(fab.kube, "n1", VOCAB), Retrier(stop), stop, boot="b")
    thread = threading.Thread(target=fw.run, daemon=True)
    thread.start()

    def follows() -> list[float]:
        lines = calls.read_text().splitlines() if calls.exists() else []
        return [float(c.split()[0]) for c in lines if " -f " in f"{c} "]

    deadline = time.monotonic() + 30
    while len(follows()) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    thread.join(5)
    assert not thread.is_alive()
    starts = follows()
    assert len(starts) >= 3, starts  # started again each time it ended
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert min(gaps) >= 0.9, gaps  # a rest of 1 s each time (without it: a few ms)


def gpu_nvl_fatal_record(t: float) -> list[str]:
    """A GB200 switch tray's GPU NVL Fatal record as published (NMXC_FATAL of
    test_scan_fabricmanager_gb200.py), with this test's time in the head and no line
    after it."""
    head, *details = (line for line in NMXC_FATAL if line)
    return [f"[{stamp(t)}]{head.split(']', 1)[1]}\n", *(f"{line}\n" for line in details)]


def test_a_record_at_the_end_of_a_quiet_log_fences_with_its_details(tmp_path):
    """Issue 39: a GPU NVL record's detail lines are held with its head; when it is the
    last thing Fabric Manager wrote, the follower ends it once the log stays quiet
    (fmrecord.RECORD_WAIT) instead of holding the fence until the next line."""
    now = time.time()
    fm = Fabric(tmp_path, booted=now - 3600)
    fm.write("")
    stop = threading.Event()
    cfg = FabricManagerConfig(source=str(fm.log), stat_file=str(fm.stat), poll=0.05)
    fw = FabricWatch(cfg, NodeWriter(fm.kube, "n1", VOCAB), Retrier(stop), stop, boot="boot-a")
    thread = threading.Thread(target=fw.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while fw._since is None and time.monotonic() < deadline:
            time.sleep(0.02)  # reading the node and the (empty) log first
        fm.write(*gpu_nvl_fatal_record(now + 1))  # and nothing after it
        while fm.ours() != {RESET} and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(5)
    assert fm.ours() == {RESET}
    evidence = fm.kube.ann(keys.ANN_LAST_FINDING)
    assert evidence["rule"] == "fm.gpu-nvl-fatal"
    assert "errorCode 0x03/0x01 = Xid 150 MSE" in evidence["msg"]
    assert "gpuGuid 0xb0cf0e0300e31440 port 61" in evidence["msg"]
