"""Issue 27's storm: one crash-looping training job on a healthy 8-GPU node, two hours of
the kernel log it leaves, in the driver's real formats.

- Xid 13 forty times, each at a different GPC/TPC (five within the first hour on each of
  GPUs 0-3, then on GPUs 4-7: the old count of 5 per hour per GPU fenced ``reset`` on four
  GPUs, as the issue reports), each event printed as the driver
  prints it (the SM Warp Exception line, the SM Global Exception line and the ESR line,
  in the same microsecond); the format is NVIDIA's (published: leptonai/gpud PR 46,
  ``Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter``);
- Xid 43 twenty times, each followed by its channel's Xid 45 cleanup
  (``43, pid=..., name=python3, Ch 00000008`` then ``45, ... Ch 00000008``: published
  pairs in gpud's tests and kubernetes-sigs/dra-driver-nvidia-gpu issue 904);
- Xid 31 once on each GPU (``Ch 0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS
  GPC2 GPCCLIENT_T1_7 faulted @ 0x2b57_b3000000. Fault is of type FAULT_PDE
  ACCESS_TYPE_VIRT_WRITE``: the R535+ format, as published in user reports);
- a few Xid 8 (``Channel 00000012``) and Xid 69 (``Class Error: ChId 0008, ...``,
  NVSentinel's parser tests).

:func:`storm` returns ``(seconds after start, message)`` pairs, the message being what
follows the log prefix; :func:`dmesg` and :func:`journal` add the two common prefixes.
"""

from __future__ import annotations

import itertools
import time

GPUS = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)  # an HGX H100's eight buses
TWO_HOURS = 7200.0


def xid(bus: int, code: int, text: str, pid: int = 48213, name: str = "python3") -> str:
    return f"NVRM: Xid (PCI:0000:{bus:02x}:00): {code}, pid={pid}, name={name}, {text}"


def xid13(bus: int, gpc: int, tpc: int, sm: int = 0, pid: int = 48213) -> list[str]:
    place = f"(GPC {gpc}, TPC {tpc}, SM {sm})"
    return [
        xid(bus, 13, f"Graphics SM Warp Exception on {place}: Out Of Range Address", pid),
        xid(bus, 13, f"Graphics SM Global Exception on {place}: Multiple Warp Errors", pid),
        xid(
            bus,
            13,
            f"Graphics Exception: ESR 0x5{gpc:x}{tpc:x}730=0xc04000b 0x5{gpc:x}{tpc:x}734=0x24",
            pid,
        ),
    ]


def xid31(bus: int, pid: int = 48213, gpc: int = 2) -> str:
    return xid(
        bus,
        31,
        f"Ch 0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC{gpc} GPCCLIENT_T1_7 "
        "faulted @ 0x2b57_b3000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE",
        pid,
    )


def xid79(bus: int) -> str:
    return (
        f"NVRM: Xid (PCI:0000:{bus:02x}:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus."
    )


def storm() -> list[tuple[float, str]]:
    """The storm, in time order: (seconds after its start, message)."""
    out: list[tuple[float, str]] = []
    places = list(itertools.product(range(8), range(9)))  # H100: 8 GPCs of 9 TPCs
    for i in range(40):  # a restart of the job every three minutes
        gpc, tpc = places[(i * 7) % len(places)]  # forty different places
        t = 30.0 + i * 175.0
        bus = GPUS[i % 4] if i < 20 else GPUS[4 + i % 4]  # first hour GPUs 0-3, then 4-7
        out += [(t, line) for line in xid13(bus, gpc, tpc, sm=i % 4, pid=40000 + i)]
    for i in range(20):
        t = 95.0 + i * 350.0
        ch = 8 + i % 4
        bus = GPUS[(i * 3) % 8]
        out.append((t, xid(bus, 43, f"Ch {ch:08x}", 50000 + i)))
        out.append((t + 0.001, xid(bus, 45, f"Ch {ch:08x}", 50000 + i)))
    for k, bus in enumerate(GPUS):
        out.append((600.0 + k * 700.0 + 0.5, xid31(bus, 60000 + k)))
    for k in range(3):
        out.append((1500.0 + k * 2000.0, xid(GPUS[k], 8, "Channel 00000012", 70000 + k)))
        out.append(
            (
                1800.0 + k * 2000.0,
                xid(
                    GPUS[k + 3],
                    69,
                    "Class Error: ChId 0008, Class 0000cbc0, Offset 00000184, Data ffffffff, "
                    "ErrorCode 00000004",
                    70100 + k,
                ),
            )
        )
    out.sort(key=lambda p: p[0])
    assert max(t for t, _ in out) < TWO_HOURS
    return out


def dmesg(events: list[tuple[float, str]], start: float = 1000.0) -> list[str]:
    """``[ uptime] message`` lines (the kernel's own timestamps: dmesg, kern.log)."""
    return [f"[{start + t:12.6f}] {msg}\n" for t, msg in events]


def journal(
    events: list[tuple[float, str]], start: float | None = None, host: str = "gpu-node-1"
) -> list[str]:
    """``journalctl -k -o short-iso`` lines (wall clock; ``start`` defaults to two hours and
    a minute ago, so the storm ends a minute ago)."""
    base = time.time() - TWO_HOURS - 60 if start is None else start
    return [
        time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(base + t)) + f" {host} kernel: {msg}\n"
        for t, msg in events
    ]


# -- issue 39: the AMD version of the storm --------------------------------------------------
# One buggy job on a healthy 8-GPU MI300X node, two hours: it restarts every three minutes
# (new pid, new PASID each time, the same name) and page-faults on the GPUs it uses, each
# fault printed in the driver's newer format (gmc_v9_0.c: the head line, then the process
# on its own line, the address, and the L2 status lines; published e.g. in
# getsolus/packages issue 7986), plus the older one-line "for process" format (ROCm
# legacy issue 3265, ROCm/amdgpu issue 172). The old count (10 page faults in an hour ->
# reset) fenced this node.
AMD_GPUS = (0x05, 0x15, 0x65, 0x75, 0x85, 0x95, 0xE5, 0xF5)  # an MI300X platform's buses


def amd_fault(bus: int, pasid: int, pid: int, name: str = "python3", vmid: int = 8) -> list[str]:
    """One page fault as gmc_v9_0.c prints it on a 6.x kernel (four lines, same time)."""
    dev = f"amdgpu 0000:{bus:02x}:00.0: amdgpu:"
    return [
        f"{dev} [gfxhub] page fault (src_id:0 ring:24 vmid:{vmid} pasid:{pasid})",
        f"{dev}  Process {name} pid {pid} thread {name} pid {pid}",
        f"{dev}   in page starting at address 0x00007f{pasid:06x}00000 from client 10",
        f"{dev} GCVM_L2_PROTECTION_FAULT_STATUS:0x00841B5B",
    ]


def amd_fault_old(bus: int, pasid: int, pid: int, name: str = "python3") -> list[str]:
    """The older format: the process on the head line."""
    dev = f"amdgpu 0000:{bus:02x}:00.0: amdgpu:"
    return [
        f"{dev} [gfxhub0] no-retry page fault (src_id:0 ring:24 vmid:3 pasid:{pasid}, "
        f"for process {name} pid {pid} thread {name} pid {pid})",
        f"{dev}   in page starting at address 0x0000000000001000 from client 27",
        f"{dev} VM_L2_PROTECTION_FAULT_STATUS:0x00301031",
    ]


def amd_reset(bus: int) -> list[str]:
    """A GPU reset the driver ran (amdgpu_device.c), as in ROCm issue 3265."""
    dev = f"amdgpu 0000:{bus:02x}:00.0: amdgpu:"
    return [
        f"{dev} GPU reset begin!",
        f"{dev} MODE2 reset",
        f"{dev} GPU reset succeeded, trying to resume",
    ]


def amd_storm() -> list[tuple[float, str]]:
    """One job's page faults for two hours, in time order: (seconds after start, message).

    The job runs on all eight GPUs and restarts every three minutes under a new pid and
    PASID; each run faults on one rank's GPU (round robin), the fault repeating within a
    second (MORE_FAULTS) and, every other run, once more a minute later."""
    out: list[tuple[float, str]] = []
    for i in range(40):
        t = 30.0 + i * 175.0
        pid, pasid = 41000 + i, 32769 + i
        bus = AMD_GPUS[i % len(AMD_GPUS)]
        lines = amd_fault(bus, pasid, pid) if i % 2 else amd_fault_old(bus, pasid, pid)
        out += [(t, line) for line in lines]
        out += [(t + 0.5, lines[0])]
        if i % 2:
            out += [(t + 60.0, line) for line in lines]
    out.sort(key=lambda p: p[0])
    assert max(t for t, _ in out) < TWO_HOURS
    return out
