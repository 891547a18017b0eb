"""Classification details: Xid 154 by hex, NVLink 5 decode, SXid severity, pid/name, PCI forms."""

from __future__ import annotations

import pytest

from fleetmedic.scan import catalog, classify, nvidia, pci

CAT = catalog.load()


def cls(message):
    return classify(message, CAT)


@pytest.mark.parametrize(
    "text,value",
    [
        ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", 2),
        ("GPU recovery action changed from 0x0 (None) to 0x2 (OS Reboot)", 2),
        ("GPU recovery action changed from 0x0 (None) to 0x1 (PF FLR)", 1),
        ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", 1),
        ("GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", 0),
        ("GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", 4),
        ("GPU recovery action changed from 0x0 to 0x3", 3),
        ("GPU recovery action changed to GPU Reset Required", None),
        ("", None),
    ],
)
def test_xid154_reads_the_hex_value_only(text, value):
    assert nvidia.recovery_action(text) == value


@pytest.mark.parametrize(
    "tail,action,rule",
    [
        ("from 0x0 (None) to 0x2 (Node Reboot Required)", "reboot", "xid.154.0x2"),
        ("from 0x0 (None) to 0x2 (OS Reboot)", "reboot", "xid.154.0x2"),
        ("from 0x0 (None) to 0x1 (PF FLR)", "reset", "xid.154.0x1"),
        ("from 0x0 (None) to 0x3 (Drain P2P)", "reset", "xid.154.0x3"),
        ("from 0x2 (Node Reboot Required) to 0x0 (Node Reboot Required)", "none", "xid.154.0x0"),
        ("from 0x0 (None) to 0x9 (Something New)", "manual", "xid.154.unknown"),
        ("to GPU Reset Required", "manual", "xid.154.unknown"),
    ],
)
def test_xid154_classification(tail, action, rule):
    found = cls(f"NVRM: Xid (PCI:0000:02:00): 154, GPU recovery action changed {tail}")
    assert (found.action, found.rule, found.bucket) == (action, rule, "XID_154")


@pytest.mark.parametrize(
    "text,action,bucket",
    [
        (
            "144, SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000002 0x0 0x0 0x0 0x0)",
            "reset",
            "RESET_GPU",
        ),
        (
            "144, SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000008 0x0 0x0 0x0 0x0)",
            "none",
            "IGNORE",
        ),
        (
            "145, RLW_REMAP Nonfatal XC0 i0 Link 1 (0x00000004 0x00000001 0x0 0x0 0x0 0x0)",
            "monitor",
            "XID_154_EVAL",
        ),
        (
            "145, RLW_RXPIPE Nonfatal XC0 i0 Link 1 (0x000000c2 0x00000001 0x0 0x0 0x0 0x0)",
            "none",
            "IGNORE",
        ),
        (
            "145, RLW_RXPIPE Fatal XC0 i0 Link 1 (0x000000c2 0x00000001 0x0 0x0 0x0 0x0)",
            "reset",
            "RESET_GPU",
        ),
        (
            "146, TLW_RX_PIPE0 Nonfatal XC0 i0 Link 2 (0x0 0x00000004 0x0 0x0 0x0 0x0)",
            "reset",
            "RESET_GPU",
        ),
        (
            "149, NETIR_BER_EVENT Nonfatal XC0 i0 Link 3 (0x0 0x00000002 0x0 0x0 0x0 0x0)",
            "none",
            "IGNORE",
        ),
        (
            "149, NETIR_MFDE_EVENT Fatal XC0 i0 Link 3 (0x0 0x00000005 0x0 0x0 0x0 0x0)",
            "reset",
            "RESET_GPU",
        ),
        (
            "150, MSE_WATCHDOG Fatal XC0 i0 Link 0 (0x0 0x00000000 0x0 0x0 0x0 0x0)",
            "reset",
            "RESET_GPU",
        ),
        (
            "147, SOMETHING_NEW Fatal XC0 i0 Link 0 (0x0 0x1 0x0 0x0 0x0 0x0)",
            "reset",  # the printed Fatal: RESET_GPU, the bucket of every fatal decoded row
            "WORKFLOW_NVLINK5_ERR",
        ),
        (
            "148, SOMETHING_NEW Nonfatal XC0 i0 Link 0 (0x0 0x1 0x0 0x0 0x0 0x0)",
            "monitor",
            "WORKFLOW_NVLINK5_ERR",
        ),
        ("146, garbage", "monitor", "WORKFLOW_NVLINK5_ERR"),
    ],
)
def test_nvlink5_decode(text, action, bucket):
    found = cls(f"NVRM: Xid (PCI:0000:01:00): {text}")
    assert (found.action, found.bucket) == (action, bucket)


@pytest.mark.parametrize(
    "line,action,rule",
    [
        (
            "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 22013, Non-fatal, Link 1 Minion Link DLREQ interrupt",
            "none",
            "sxid.22013",
        ),
        (
            "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 22013, Fatal, Link 1 Minion Link DLREQ interrupt",
            "reset",
            "sxid.22013",
        ),
        (
            "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12020, Fatal, Link 2 egress sequence ID error",
            "reboot",
            "sxid.12020",
        ),
        (
            "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 99999, Fatal, Link 3 unheard of",
            "reset",
            "sxid.unknown",
        ),
        (
            "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 99999, Non-fatal, Link 3 unheard of",
            "monitor",
            "sxid.unknown",
        ),
        ("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 99999, Data {0x1}", "monitor", "sxid.unknown"),
        (
            "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 11012, Non-fatal, Link 4 ingress SBE",
            "monitor",
            "sxid.11012",
        ),
    ],
)
def test_sxid(line, action, rule):
    found = cls(line)
    assert (found.kind, found.action, found.rule, found.pci) == ("sxid", action, rule, "0000:05:00")


@pytest.mark.parametrize(
    "rest,pid,name,text",
    [
        ("pid=1234, name=python3, Ch 00000008", 1234, "python3", "Ch 00000008"),
        (
            "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
            None,
            None,
            "GPU has fallen off the bus.",
        ),
        (
            "pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.",
            1896,
            None,
            "Row Remapper: New row marked for remapping, reset gpu to activate.",
        ),
        (
            "pid=8121, name=Web Content, Graphics SM Warp Exception",
            8121,
            "Web Content",
            "Graphics SM Warp Exception",
        ),
        ("pid=7, name=(sd-pam), Ch 00000001", 7, "(sd-pam)", "Ch 00000001"),
        ("pid=7, name='quoted', Ch 00000001", 7, "'quoted'", "Ch 00000001"),
        ("pid=7, name=a, b, Ch 00000001", 7, "a, b", "Ch 00000001"),
        (
            "pid=3188489, name=trigger_xid, channel 0x0b00000a",
            3188489,
            "trigger_xid",
            "channel 0x0b00000a",
        ),
        ("pid=5678, name=idle_timeout", 5678, "idle_timeout", ""),
        ("Channel 00000001", None, None, "Channel 00000001"),
    ],
)
def test_pid_and_process_name(rest, pid, name, text):
    xid = nvidia.parse_xid(f"NVRM: Xid (PCI:0000:01:00): 13, {rest}")
    assert (xid.pid, xid.process, xid.text) == (pid, name, text)


@pytest.mark.parametrize(
    "raw,normal",
    [
        ("PCI:0000:3B:00", "0000:3b:00"),
        ("0000:03:00", "0000:03:00"),
        ("0000:04:00.0", "0000:04:00"),
        ("00000000:3b:00.0", "0000:3b:00"),
        ("3b:00.0", "0000:3b:00"),
        ("0019:01:00", "0019:01:00"),
        ("10de:26b5", None),
        ("not a pci id", None),
        ("", None),
        (None, None),
    ],
)
def test_pci_normalize(raw, normal):
    assert pci.normalize(raw) == normal


def test_pci_find_ignores_times_and_ipv6():
    assert pci.find("Feb 14 05:03:41 host kernel: foo") is None
    assert pci.find("peer fe80::966d:ae03:8b:df78%ib0<53249>") is None
    assert pci.find("amdgpu 0000:c5:00.0: amdgpu: GPU reset begin!") == "0000:c5:00"


def test_not_gpu_lines_give_nothing():
    for message in (
        "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01",
        "amdgpu: Topology: Add CPU node",
        "",
        "Xid",
        "SXid",
        "NVRM: Xid (",
        "a uncorrectable b",
    ):
        assert cls(message) is None, message
