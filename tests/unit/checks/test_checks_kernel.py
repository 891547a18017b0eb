"""kernel.log: one pass over the current boot's kernel log with the scanner's catalog."""

import os

import pytest

from fleetmedic.checks import kernel
from fleetmedic.checks.config import CheckConfig, KernelConfig
from fleetmedic.policy.strikes import Observation, Strikes, decide

BANNER = (
    "Nov 21 10:00:00 gpu-7 kernel: [    0.000000] Linux version 6.1.0-26-amd64 "
    "(debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14) 12.2.0) #1 SMP PREEMPT_DYNAMIC\n"
)
XID79 = (
    "Nov 21 10:05:00 gpu-7 kernel: [  300.123456] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', "
    "name=<unknown>, GPU has fallen off the bus.\n"
)
XID64 = (
    "Nov 21 10:06:00 gpu-7 kernel: [  360.000000] NVRM: Xid (PCI:0000:5d:00): 64, pid='<unknown>', "
    "name=<unknown>, Row remapping failure\n"
)
XID13 = (
    "Nov 21 10:05:01 gpu-7 kernel: [  301.000000] NVRM: Xid (PCI:0000:3b:00): 13, pid=1234, name=python, "
    "Graphics Exception: ESR 0x504648=0x10000\n"
)
NOISE = "Nov 21 10:01:00 gpu-7 kernel: [   60.000000] e1000e: eth0 NIC Link is Up 1000 Mbps Full Duplex\n"


def check(tmp_path, *lines):
    log = tmp_path / "kern.log"
    log.write_text("".join(lines))
    (r,) = kernel.run(CheckConfig(kernel=KernelConfig(path=str(log))))
    assert r.category == "kernel" and r.name == "kernel.log"
    return r


def test_clean_log(tmp_path):
    r = check(tmp_path, BANNER, NOISE)
    assert r.status == "ok" and r.evidence["lines"] == 2 and r.evidence["findings"] == []


def test_xid_79_is_a_definitive_reboot(tmp_path):
    r = check(tmp_path, BANNER, NOISE, XID79, XID13)
    assert r.status == "problem" and r.action == "reboot"
    assert r.summary.startswith("Xid 79 on 0000:3b:00")
    assert r.evidence["counts"] == {"monitor": 1, "reboot": 1}
    assert (
        decide(
            Strikes(),
            [Observation(r.category, r.status, r.name, r.action)],
            in_repair=False,
            slow_network=False,
        ).repair
        == "reboot"
    )


def test_worst_action_wins(tmp_path):
    r = check(tmp_path, BANNER, XID79, XID64)
    assert r.action == "manual" and "Xid 64" in r.summary and "(+1 more)" in r.summary


def test_monitor_findings_alone_are_ok(tmp_path):
    r = check(tmp_path, BANNER, XID13)
    assert r.status == "ok" and "1 finding(s) to monitor" in r.summary


def test_only_the_current_boot_counts(tmp_path):
    assert check(tmp_path, BANNER, XID79, BANNER, NOISE).status == "ok"
    assert check(tmp_path, BANNER, XID79, BANNER).status == "ok"
    assert check(tmp_path, BANNER, NOISE, BANNER, XID79).status == "problem"
    assert check(tmp_path, XID79).status == "problem"  # no banner at all: all of it is this boot


def test_a_message_mentioning_the_banner_is_not_a_new_boot(tmp_path):
    mention = "Nov 21 10:07:00 gpu-7 kernel: [  420.000000] mydrv: built for Linux version 5.10\n"
    assert check(tmp_path, BANNER, XID79, mention).status == "problem"


def test_unreadable_log_is_unknown(tmp_path):
    (r,) = kernel.run(CheckConfig(kernel=KernelConfig(path=str(tmp_path / "missing.log"))))
    assert r.status == "unknown" and "cannot read kernel log" in r.summary


@pytest.mark.skipif(not os.access("/dev/kmsg", os.R_OK), reason="/dev/kmsg is not readable here")
def test_dev_kmsg_is_read_without_waiting():
    (r,) = kernel.run(CheckConfig())
    assert r.status in ("ok", "problem") and r.evidence["source"] == "/dev/kmsg" and r.duration < 5
