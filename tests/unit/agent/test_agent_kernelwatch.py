"""KernelWatch: current boot only, act once per line across restarts, never miss a line."""

from __future__ import annotations

import threading
import time

import pytest
from agent_helpers import MANUAL, REBOOT, VOCAB, Node, banner, xid

from fleetmedic.agent.config import KernelWatchConfig
from fleetmedic.agent.kernelwatch import KernelWatch
from fleetmedic.agent.logsource import prescan
from fleetmedic.agent.retry import Retrier
from fleetmedic.agent.writer import NodeWriter
from fleetmedic.model import keys


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path)


def test_prescan_finds_the_last_boot_and_its_findings(node):
    node.log.write_text(
        xid(bus=1)
        + banner()
        + xid(bus=2)
        + banner()
        + "[ 1.0] x\n"
        + xid(bus=3)
        + "[ 2.0] NVRM: Xid (PCI:0000:04:00): 79, partial"
    )
    pre = prescan(str(node.log))
    assert pre.start == 4 and pre.seg.endswith("@4")
    assert sorted(n for lines in pre.seen.values() for n in lines) == [6]  # not the partial line


def test_prescan_without_a_banner_or_a_file(node):
    assert prescan(str(node.log)).start == 0  # missing: an empty file
    node.log.write_text(xid(bus=1) + "[ 1.0] x\n" + xid(bus=2))
    pre = prescan(str(node.log))
    assert (pre.start, pre.seg) == (0, "")
    assert sorted(n for lines in pre.seen.values() for n in lines) == [1, 3]


def test_prescan_banner_on_the_first_and_on_an_unfinished_last_line(node):
    node.log.write_text(banner() + xid() + banner().rstrip("\n"))  # the second is not written yet
    pre = prescan(str(node.log))
    assert pre.start == 1 and pre.seg.endswith("@1")
    assert [n for lines in pre.seen.values() for n in lines] == [2]


def test_xid_79_in_this_boot_fences(node):
    node.log.write_text(banner() + xid())
    kw = node.run_once()
    assert kw.acted == 1 and REBOOT in node.kube.taints()
    mark = node.kube.ann(keys.ANN_LAST_FINDING)
    assert (
        mark["rule"] == "xid.79" and mark["n"] == 2 and mark["boot"] == "boot-a" and mark["acted"]
    )


def test_row_remap_failure_fences_manual(node):
    node.log.write_text(xid(code=64, text="Row remapping failure"))
    node.run_once()
    assert MANUAL in node.kube.taints()


def test_an_earlier_boot_is_ignored(node):
    node.log.write_text(xid(t=50.0) + banner() + "[    3.000000] all fine\n")
    kw = node.run_once()
    assert kw.acted == 0 and node.kube.taints() == {"example.com/team=a"}


def test_monitor_findings_do_not_fence(node):
    node.log.write_text(xid(code=63, text="Row remapper: row remapping event"))
    assert node.run_once().acted == 0
    assert node.kube.ann(keys.ANN_STRIKES) is None


def test_restart_does_not_refence_a_handled_line_but_acts_on_new_ones(node):
    node.log.write_text(banner() + xid(bus=1, t=10.0))
    node.run_once()
    node.release()
    again = node.run_once()  # restart: same lines, already handled
    assert again.acted == 0 and again.skipped == 1 and REBOOT not in node.kube.taints()
    with open(node.log, "a") as f:  # written while the agent was down
        f.write(xid(bus=2, t=20.0))
    third = node.run_once()
    assert third.acted == 1 and third.skipped == 1 and REBOOT in node.kube.taints()


def test_identical_lines_are_told_apart_by_position(node):
    line = "NVRM: Xid (PCI:0000:5a:00): 79, GPU has fallen off the bus.\n"  # no timestamp at all
    node.log.write_text(line)
    node.run_once()
    node.release()
    with open(node.log, "a") as f:
        f.write("unrelated\n" + line)  # the same fault again, later
    kw = node.run_once()
    assert (kw.skipped, kw.acted) == (1, 1) and REBOOT in node.kube.taints()


def test_a_new_boot_in_the_file_makes_old_lines_stale_and_new_ones_count(node):
    # identical dmesg banners (same kernel, [0.000000]) still start distinct boots
    node.log.write_text(banner() + xid(t=100.0))
    node.run_once()
    node.release()
    with open(node.log, "a") as f:
        f.write(banner() + xid(t=100.0))  # same text, same uptime, next boot
    kw = node.run_once()
    assert kw.acted == 1 and REBOOT in node.kube.taints()


def test_watermark_of_another_boot_id_does_not_hide_this_boots_lines(node):
    node.log.write_text(xid(t=5.0))
    node.run_once()
    node.release()
    node.boot_file.write_text("boot-b\n")  # a reboot the file does not show (no banner)
    assert node.run_once().acted == 1


def test_finding_while_under_repair_moves_the_watermark_without_acting(node):
    # as strong as the fence or weaker (issue 27: fences only go up, never down)
    node.kube.node["spec"]["taints"].append(VOCAB.manual.as_taint())
    node.log.write_text(xid(code=79))
    kw = node.run_once()
    assert kw.acted == 1 and REBOOT not in node.kube.taints() and MANUAL in node.kube.taints()
    assert node.kube.ann(keys.ANN_LAST_FINDING)["acted"] is False
    node.release()
    assert node.run_once().acted == 0  # handled; a release does not replay it


def test_a_stronger_finding_raises_the_fence_and_keeps_other_taints(node):
    node.kube.node["spec"]["taints"].append(VOCAB.reboot.as_taint())
    node.log.write_text(xid(code=64, text="Row remapping failure"))
    kw = node.run_once()
    assert kw.acted == 1
    assert node.kube.taints() == {"example.com/team=a", MANUAL}  # replaced, others kept
    mark = node.kube.ann(keys.ANN_LAST_FINDING)
    assert mark["acted"] is True and mark["rule"] == "xid.64"
    (event,) = node.kube.events
    assert event[0] == "FleetmedicFenced" and "raised fleetmedic.io/repair=reboot to" in event[2]
    node.release()
    assert node.run_once().acted == 0  # handled; a release does not replay it


def test_follow_acts_within_a_fraction_of_a_second_and_stops(node):
    node.log.write_text(banner())
    stop = threading.Event()
    kw = node.watch(once=False, stop=stop)
    thread = threading.Thread(target=kw.run, daemon=True)
    thread.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    with open(node.log, "a") as f:
        f.write(xid())
    while REBOOT not in node.kube.taints() and time.monotonic() - t0 < 5:
        time.sleep(0.005)
    elapsed = time.monotonic() - t0
    assert REBOOT in node.kube.taints() and elapsed < 0.5, elapsed
    stop.set()
    thread.join(2)
    assert not thread.is_alive()


def test_follow_survives_rotation(node):
    node.log.write_text(banner())
    stop = threading.Event()
    kw = node.watch(once=False, stop=stop)
    thread = threading.Thread(target=kw.run, daemon=True)
    thread.start()
    time.sleep(0.3)
    node.log.rename(node.log.with_suffix(".1"))
    node.log.write_text(xid(bus=9, t=500.0))
    deadline = time.monotonic() + 5
    while REBOOT not in node.kube.taints() and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(2)
    assert REBOOT in node.kube.taints()


def test_missing_log_is_waited_for(node):
    stop = threading.Event()
    kw = node.watch(once=False, stop=stop)
    thread = threading.Thread(target=kw.run, daemon=True)
    thread.start()
    time.sleep(0.2)
    node.log.write_text(xid())
    deadline = time.monotonic() + 5
    while REBOOT not in node.kube.taints() and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(2)
    assert REBOOT in node.kube.taints()


def test_source_none_does_nothing(node):
    stop = threading.Event()
    cfg = KernelWatchConfig(source="none")
    KernelWatch(cfg, NodeWriter(node.kube, "n1", VOCAB), Retrier(stop), stop).run()
    assert node.kube.writes == 0


def kmsg(t: float, bus: int = 0x5A) -> str:
    return (
        f"3,{int(t)},{int(t * 1e6)},-;NVRM: Xid (PCI:0000:{bus:02x}:00): 79, GPU has fallen off the bus.\n"
        f" SUBSYSTEM=pci\n DEVICE=+pci:0000:{bus:02x}:00.0\n"
    )


def test_kmsg_records_are_told_apart_by_time_across_restarts(node):
    """/dev/kmsg after a restart: no pre-scan, the watermark's uptime decides."""
    node.log.write_text("6,1,0,-;Linux version 6.1.0\n" + kmsg(100.0))

    def run():
        kw = node.watch()
        kw.kind = "kmsg"  # a file of records stands in for the device
        kw.run()
        return kw

    assert run().acted == 1 and REBOOT in node.kube.taints()
    assert node.kube.ann(keys.ANN_LAST_FINDING)["t"] == 100.0
    node.release()
    again = run()
    assert (again.acted, again.skipped) == (0, 1) and REBOOT not in node.kube.taints()
    node.log.write_text(kmsg(100.0))  # the ring buffer wrapped: the banner is gone
    again = run()
    assert (again.acted, again.skipped) == (0, 1) and REBOOT not in node.kube.taints()
    with open(node.log, "a") as f:
        f.write(kmsg(250.0, bus=0x5B))
    assert run().acted == 1 and REBOOT in node.kube.taints()
