"""Reading NVIDIA's workflow context (GPC/TPC/SM, MMU engine, channel, cause) from Xid
lines, in every log format the scanner reads: the scanner strips the prefix, the
context comes from the finding's message."""

from __future__ import annotations

import pytest

from fleetmedic.scan import Scanner
from fleetmedic.scan.xidcontext import XidContext, context_of

# Published lines (tests/data/corpus/lines.yaml and the sources named there), and the
# shapes the driver prints them in.
XID13 = (
    "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp "
    "Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter"
)
XID13_GLOBAL = (
    "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Global "
    "Exception on (GPC 7, TPC 7, SM 0): Multiple Warp Errors"
)
XID13_ESR = (
    "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception: "
    "ESR 0x57c730=0xc04000b 0x57c734=0x24 0x57c728=0x1f81fb60 0x57c72c=0x1174"
)
XID31 = (
    "NVRM: Xid (PCI:0000:00:06): 31, pid=79749, name=exe, Ch 0000000a, intr 00000000. MMU "
    "Fault: ENGINE GRAPHICS GPC2 GPCCLIENT_T1_7 faulted @ 0x2b57_b3000000. Fault is of type "
    "FAULT_PDE ACCESS_TYPE_VIRT_WRITE"
)
XID31_NOGPC = (
    "NVRM: Xid (PCI:0000:cb:00): 31, pid=626486, name=pt_main_thread, Ch 00000008, intr "
    "00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_14 faulted @ 0x7f2f_cca58000. Fault is "
    "of type FAULT_PDE ACCESS_TYPE_VIRT_READ"
)
XID31_OLD = "NVRM: Xid (PCI:0000:01:00): 31, Ch 00000003, engmask 00000101, intr 10000000"
XID43 = "NVRM: Xid (PCI:0009:01:00): 43, pid=3188489, name=trigger_xid, channel 0x0b00000a"
XID45 = (
    "NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by "
    "previous Xid 149"
)

PREFIXES = [
    "",
    "[ 1843.308145] ",
    "[Fri Aug 30 11:43:09 2024] ",
    "kern  :warn  : [ 1843.308145] ",
    "Feb 14 05:03:41 gpu-node-3 kernel: ",
    "2024-02-14T05:03:41+0000 gpu-node-3 kernel: ",
    "Dec  2 11:49:53 worker4 kernel: [  885.242168] ",
    "<4>Feb 14 05:03:41 host kernel: ",
    "4,1234,5678901,-;",
]


def _context(line: str) -> XidContext:
    (finding,) = Scanner(dedup=False).feed(line)
    return context_of(finding.message)


@pytest.mark.parametrize("prefix", PREFIXES)
def test_xid13_place_in_every_format(prefix):
    ctx = _context(prefix + XID13)
    assert (ctx.gpc, ctx.tpc, ctx.sm) == (7, 7, 0)
    assert ctx.location(("gpc", "tpc")) == "gpc=7,tpc=7"
    assert _context(prefix + XID13_GLOBAL).location(("gpc", "tpc")) == "gpc=7,tpc=7"
    assert _context(prefix + XID13_ESR).location(("gpc", "tpc")) is None  # no place said


@pytest.mark.parametrize("prefix", PREFIXES)
def test_xid31_engine_client_channel_in_every_format(prefix):
    ctx = _context(prefix + XID31)
    assert (ctx.engine, ctx.gpc, ctx.client, ctx.channel, ctx.fault_type) == (
        "GRAPHICS",
        2,
        "GPCCLIENT_T1_7",
        0x0A,
        "FAULT_PDE",
    )
    nogpc = _context(prefix + XID31_NOGPC)
    assert (nogpc.engine, nogpc.gpc, nogpc.client, nogpc.channel) == (
        "GRAPHICS",
        None,
        "GPCCLIENT_T1_14",
        8,
    )
    old = _context(prefix + XID31_OLD)
    assert (old.engine, old.channel) == (None, 3)


@pytest.mark.parametrize("prefix", PREFIXES)
def test_channels_and_causes(prefix):
    assert _context(prefix + XID43).channel == 0x0B00000A
    ctx = _context(prefix + XID45)
    assert (ctx.channel, ctx.cause) == (1, 149)


def test_tex_exception_has_gpc_and_tpc_but_no_sm():
    ctx = context_of("Graphics TEX Exception on (GPC 0, TPC 1): TEX NACK / Page Fault")
    assert (ctx.gpc, ctx.tpc, ctx.sm) == (0, 1, None)
    assert ctx.location(("gpc", "tpc", "sm")) is None


@pytest.mark.parametrize("text", ["", "x" * 5000, "(GPC 99999999, TPC x)", "MMU Fault: ENGINE"])
def test_never_raises_and_says_nothing_it_cannot_read(text):
    ctx = context_of(text)
    assert ctx.location(("gpc", "tpc")) is None or "GPC" in text
