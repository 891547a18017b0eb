#!/usr/bin/env python3
"""Scan throughput: ``fleetmedic scan`` against ``grep -cE`` on the same generated log.

Usage::

    .venv/bin/python bench/scan_throughput.py              # 1 GB, the issue's figure
    .venv/bin/python bench/scan_throughput.py --size 200M  # quick run
    .venv/bin/python bench/scan_throughput.py --smoke      # CI: seconds, checks it works

It writes a mixed kernel log of ``--size`` bytes into a temporary directory
(removed afterwards unless ``--keep``): dmesg, ``dmesg -T``, ISO, journalctl
short / short-iso, syslog and ``/dev/kmsg`` lines of ordinary kernel and
daemon chatter, with GPU lines (NVIDIA Xid/SXid/NVRM, amdgpu, NCCL/CUDA,
including benign amdgpu/NVRM lines) mixed in at ``--gpu-rate``. The file is
read once to warm the page cache, then, alternating, ``--repeat`` times:

- the baseline: ``grep -c`` for the catalog's trigger literals, the same set the
  pre-filter searches (``Scanner().triggers``), both as ``-E 'a|b|...'`` and as
  ``-F -e a -e b ...``; the faster of the two is the baseline;
- ``fleetmedic scan --json --jobs 1 FILE > /dev/null`` as a user runs
  it, in one process (Python start-up, catalog load, dedup, JSON output);
- the same with the default ``--jobs`` (one pre-filter process per CPU, at
  most 4, for files of 256 MB or more);
- both again with ``FLEETMEDIC_SCAN_ENGINE=re``: the standard library only
  (``re`` for the literals, ``bytes.count`` for the line numbers), i.e. the
  figure before Hyperscan and StringZilla and the one on platforms without
  them (skipped when Hyperscan is not installed: then the default *is* that path);
- the library alone: ``Scanner().scan_binary(file)`` in this process;
- the one-process CLI on an empty file: its fixed start-up cost (interpreter,
  imports, catalog), printed as CPU seconds and as a share of grep's whole run.

It prints the best wall time of each, MB/s, the CPU time (user + system,
all processes of the run), the ratio of fleetmedic's speed to grep's
(1.0 = as fast as grep) by wall time and by CPU time, and the load average
before and after; the last lines give the two figures of issue 12, the
one-process CLI and the default CLI against grep, and issue 39's: the median
over the ``--repeat`` rounds (5 by default) of each round's ratio, the
one-process CLI against the faster grep of the same round (paired, so a load
spike hits both sides of a ratio). Exit status: 1 when that median is below
``--target`` (>= 1.0x), 2 when a run fails or the scans disagree. ``--smoke`` runs every step once on a few MB and checks
only that they work and agree (exit 0 or 2), for CI.
The ratios are measured in the same run, so they do not depend on the
machine; the wall ratio does depend on load from other processes (use
``--repeat``), the CPU ratio much less.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BLOCK = 4 * 1024 * 1024
DISTINCT_BLOCKS = 48

# Ordinary lines of a GPU node's kernel log and journal ({n} is a number).
NOISE = [
    "mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE",
    "EXT4-fs (md127p3): re-mounted 0f3cd65a-338b-4574-bba3-ecef214e1917 r/w. Quota mode: none.",
    "workqueue: ib_cache_event_task [ib_core] hogged CPU for >10000us 4 times, consider switching to WQ_UNBOUND",
    "IPv6: ADDRCONF(NETDEV_CHANGE): cali{n}a5b: link becomes ready",
    "device veth{n} entered promiscuous mode",
    "cni0: port 3(veth{n}) entered forwarding state",
    'audit: type=1400 audit({n}.123:{n}): apparmor="DENIED" operation="open" profile="cri-containerd"',
    "TCP: request_sock_TCP: Possible SYN flooding on port {n}. Sending cookies.",
    "nvme nvme0: I/O {n} QID 3 timeout, completion polled",
    "xfs filesystem being mounted at /var/lib/kubelet/pods/{n} supports timestamps until 2038",
    "Memory cgroup out of memory: Killed process {n} (python3) total-vm:1234567kB, anon-rss:1234kB",
    "perf: interrupt took too long ({n} > 2500), lowering kernel.perf_event_max_sample_rate to 79750",
    "usb 1-1: new high-speed USB device number {n} using xhci_hcd",
    "bond0: (slave eth{n}): link status definitely up, 25000 Mbps full duplex",
    "ACPI: \\_SB_.PCI0: Device [PCI0] status [0000000f]",
]
DAEMON = [
    (
        "kubelet[2211]",
        'I0214 05:03:43.123456    2211 kubelet.go:2345] "SyncLoop (PLEG): event for pod" pod="ns/p-{n}"',
    ),
    (
        "containerd[1201]",
        'time="2024-02-14T05:03:44Z" level=info msg="cleaning up dead shim" id={n}',
    ),
    ("systemd[1]", "Started session-{n}.scope - Session {n} of User ubuntu."),
    ("sshd[{n}]", "Accepted publickey for ubuntu from 10.0.0.{n} port 50022 ssh2"),
    ("nvidia-persistenced[991]", "device 0000:3b:00.0 - persistence mode enabled."),
]
# GPU lines (published shapes; see tests/unit/scan/data for sources). Some are benign.
GPU = [
    "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter",
    "NVRM: Xid (PCI:0000:cb:00): 109, pid={n}, name=pt_main_thread, Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005",
    "NVRM: Xid (PCI:0000:dc:00): 45, pid={n}, name=python3, Ch 00000001 caused by previous Xid 149",
    "NVRM: Xid (PCI:0000:02:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
    "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid={n}, Contained: CE User Channel (0x9). RST: No, D-RST: No",
    "NVRM: GPU at PCI:0000:3b:00: GPU-b850f46d-d5ea-c752-ddf3-c4453e44d3f7",
    "NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)",
    "nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link {n} Minion Link DLREQ interrupt",
    "nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Data {{0x000001c0, 0x00bd5c8a, 0x00000500}}",
    "amdgpu 0000:c5:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled seq={n}, emitted seq={n}",
    "amdgpu 0000:c5:00.0: amdgpu: GPU reset begin!",
    "amdgpu 0000:01:00.0: amdgpu: 2 uncorrectable hardware errors detected in umc block",
    "amdgpu 0000:12:00.0: amdgpu: VRAM: 512M 0x000000F400000000 - 0x000000F41FFFFFFF (512M used)",
    "[drm] amdgpu: 15579M of GTT memory ready.",
    # issue 39: the source-derived families and FreeBSD's drmn0 lines (Fabric Manager's own
    # log is another file, read with its own rules: not in a kernel log)
    "NVRM: kfspWaitForResponse: FSP command timed out",
    "NVRM: GPU{n} rpcRmApiAlloc_GSP: GspRmAlloc failed: hClient=0xc1d1a616; hParent=0x5c000054; "
    "hObject=0x5c00005b; hClass=0x0000c86f; paramsSize=0x00000170; paramsStatus=0x00000056; "
    "status=0x00000056",
    "amdgpu 0000:c5:00.0: amdgpu: no vmid pasid mapping supported",
    "drmn0: [gfxhub] page fault (src_id:0 ring:88 vmid:4 pasid:{n}, for process  pid {n} thread  pid {n})",
]
POD = [
    "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    "worker-0:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer 10.216.210.236<54862> "
    "with status=12 opcode=0 len=0 vendor err 129 (Recv)",
]
MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]


def _fmt(template: str, rng: random.Random) -> str:
    return (
        template.replace("{n}", str(rng.randrange(1, 99999))).replace("{{", "{").replace("}}", "}")
    )


def _line(rng: random.Random, message: str, kernel: bool, style: int, clock: list[float]) -> str:
    clock[0] += rng.random() * 0.01
    up = clock[0]
    wall = 1_770_000_000 + up
    if style == 0:
        return f"[{up:12.6f}] {message}"
    if style == 1:
        return f"[{time.strftime('%a %b %d %H:%M:%S %Y', time.gmtime(wall))}] {message}"
    if style == 2:
        return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(wall))},{int(up * 1e6) % 1000000:06d}+00:00 {message}"
    tag = "kernel" if kernel else None
    if style == 3:
        return f"{time.strftime('%b %d %H:%M:%S', time.gmtime(wall))} gpu-node-17 {tag or 'dockerd[812]'}: {message}"
    if style == 4:
        return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(wall))}+0000 gpu-node-17 {tag or 'kubelet[2211]'}: {message}"
    return f"{rng.choice('3456')},{rng.randrange(1, 10**6)},{int(up * 1e6)},-;{message}"


def _block(rng: random.Random, gpu_rate: float) -> bytes:
    out: list[str] = []
    size = 0
    style = rng.randrange(6)
    clock = [rng.random() * 1e5]
    while size < BLOCK:
        if rng.random() < 0.002:
            style = rng.randrange(6)  # formats come in runs, as in real files
        roll = rng.random()
        if roll < gpu_rate:
            pool = POD if rng.random() < 0.1 else GPU
            line = _line(rng, _fmt(rng.choice(pool), rng), True, style, clock)
        elif roll < 0.7:
            line = _line(rng, _fmt(rng.choice(NOISE), rng), True, style, clock)
        else:
            tag, text = rng.choice(DAEMON)
            message = _fmt(text, rng)
            line = (
                _line(rng, message, False, style, clock)
                if style in (3, 4)
                else _line(rng, f"{_fmt(tag, rng)}: {message}", True, style, clock)
            )
        out.append(line)
        size += len(line) + 1
    return ("\n".join(out) + "\n").encode()


def generate(path: Path, size: int, gpu_rate: float, seed: int) -> None:
    rng = random.Random(seed)
    blocks = [_block(rng, gpu_rate) for _ in range(min(DISTINCT_BLOCKS, max(1, size // BLOCK)))]
    written = 0
    with open(path, "wb") as out:
        while written < size:
            block = rng.choice(blocks)
            out.write(block)
            written += len(block)


def _parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(command: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user+sys, all processes of the run) and stdout."""
    cpu = _cpu_children()
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, env=env, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        print(
            f"{command[0]} failed ({done.returncode}): "
            f"{done.stderr.decode(errors='replace').strip()}",
            file=sys.stderr,
        )
        sys.exit(2)
    return elapsed, _cpu_children() - cpu, done.stdout.decode(errors="replace")


def _library(path: Path) -> tuple[float, float, int]:
    from fleetmedic.scan import Scanner

    cpu = time.process_time()
    start = time.perf_counter()
    with open(path, "rb") as handle:
        count = sum(1 for _ in Scanner().scan_binary(handle))
    return time.perf_counter() - start, time.process_time() - cpu, count


def _grep_commands(path: Path) -> dict[str, list[str]]:
    """``grep -c`` for the pre-filter's own trigger literals, as -E and as -F."""
    from fleetmedic.scan import Scanner

    triggers = Scanner().triggers
    return {
        "grepE": ["grep", "-cE", "|".join(re.escape(t) for t in triggers), str(path)],
        "grepF": ["grep", "-cF", *(arg for t in triggers for arg in ("-e", t)), str(path)],
    }


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="1G", help="log size, e.g. 1G (default), 200M")
    parser.add_argument(
        "--gpu-rate",
        type=float,
        default=0.001,
        help="fraction of lines that are GPU/NCCL/CUDA lines (default 0.001: one in a thousand, "
        "already a sick node; try 0.01 for a storm)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=5,
        help="timed rounds of each (default 5): the best of each is shown, the median of "
        "the per-round ratios is the figure",
    )
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument(
        "--tmpdir", default=None, help="where to write the log (default: system temp)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the generated log")
    parser.add_argument(
        "--log", type=Path, default=None, help="use this log instead of generating one"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="CI smoke run: 8 MB with a GPU-line rate of 1%%, one trial; exit 0 if every step "
        "works and the scans agree (no speed target)",
    )
    parser.add_argument(
        "--target", type=float, default=1.0, help="one-process CLI / grep wall ratio to reach"
    )
    args = parser.parse_args()
    if args.smoke:
        args.size, args.repeat, args.gpu_rate = "8M", 1, 0.01
    size = _parse_size(args.size)
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "controller"))
    from fleetmedic.scan import literals

    fleetmedic = [sys.executable, "-m", "fleetmedic", "scan", "--json"]
    workdir = Path(tempfile.mkdtemp(prefix="fleetmedic-bench-", dir=args.tmpdir))
    # As installed (pip compiles the bytecode): one untimed run below writes
    # fleetmedic's __pycache__ as any run does, also where PYTHONDONTWRITEBYTECODE is
    # set (then every run would compile the sources again, ~20 ms no user pays twice),
    # and the catalog's parse and the regexes' programs in the user's cache
    # (scan/catalogcache.py, scan/regexcache.py), as a user's first scan does.
    env = dict(os.environ, PYTHONPATH=str(root / "controller"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop(literals.ENGINE_ENV, None)
    engine = literals.default_engine()
    engine += f"+{literals.finder([b'NVRM'], engine).counter}"  # what counts the lines
    pure_env = dict(env, **{literals.ENGINE_ENV: "re"})
    compare = not engine.startswith("re+")  # also time the standard library (the "before")
    failed = False
    try:
        path = args.log or workdir / "mixed.log"
        if args.log is None:
            start = time.perf_counter()
            generate(path, size, args.gpu_rate, args.seed)
            print(
                f"generated {path.stat().st_size / 1e6:.0f} MB ({args.gpu_rate:.3%} GPU lines) "
                f"in {time.perf_counter() - start:.1f}s: {path}"
            )
        mb = path.stat().st_size / 1e6
        with open(path, "rb") as handle:  # warm the page cache for both
            while handle.read(1 << 24):
                pass
        greps = _grep_commands(path)
        (workdir / "empty.log").touch()
        for run_env in (env, pure_env):  # untimed: caches bytecode and catalog, checks it runs
            _timed([*fleetmedic, str(workdir / "empty.log")], run_env)
        print(f"load average before: {_load()} ({os.cpu_count()} CPUs); engine: {engine}")
        best: dict[str, list[float]] = {}

        def keep(name: str, wall: float, cpu: float) -> None:
            old = best.get(name)
            best[name] = [min(wall, old[0]), min(cpu, old[1])] if old else [wall, cpu]

        def cli(name: str, extra: list[str], run_env: dict[str, str]) -> int:
            wall, cpu, out = _timed([*fleetmedic, *extra, str(path)], run_env)
            keep(name, wall, cpu)
            return out.count("\n")

        matches: dict[str, int] = {}
        findings = lib_findings = 0
        paired: list[float] = []  # per round: the faster grep's wall / the one-process CLI's
        for _ in range(max(1, args.repeat)):
            round_grep = []
            for key, command in greps.items():
                wall, cpu, out = _timed(command)
                keep(key, wall, cpu)
                round_grep.append(wall)
                matches[key] = int(out.strip() or 0)
            cli1_wall, _cpu, out1 = _timed([*fleetmedic, "--jobs", "1", str(path)], env)
            keep("cli1", cli1_wall, _cpu)
            paired.append(min(round_grep) / cli1_wall)
            counts = {"cli1": out1.count("\n"), "cli": cli("cli", [], env)}
            if compare:
                counts["re1"] = cli("re1", ["--jobs", "1"], pure_env)
                counts["re"] = cli("re", [], pure_env)
            wall, cpu, _out = _timed([*fleetmedic, "--jobs", "1", str(workdir / "empty.log")], env)
            keep("start", wall, cpu)  # the CLI's fixed cost: interpreter, imports, catalog
            wall, cpu, lib_findings = _library(path)
            keep("lib", wall, cpu)
            findings = counts["cli1"]
            if findings == 0 or len(set(counts.values())) != 1 or lib_findings != findings:
                print(
                    f"scans disagree or found nothing: CLI {counts}, library {lib_findings}",
                    file=sys.stderr,
                )
                sys.exit(2)
            if len(set(matches.values())) != 1:
                print(f"grep -E and -F disagree: {matches}", file=sys.stderr)
                sys.exit(2)
        best["grep"] = min(best["grepE"], best["grepF"])  # the faster grep is the baseline
        cpus = min(4, os.cpu_count() or 1)
        rows = [
            ("grepE", "grep -cE 'trigger|...'", f"{matches['grepE']} matching lines"),
            ("grepF", "grep -cF -e trigger ...", ""),
            ("cli1", f"fleetmedic scan --jobs 1 ({engine})", f"{findings} findings after dedup"),
            ("cli", f"fleetmedic scan (auto: --jobs {cpus}) ({engine})", ""),
        ]
        if compare:
            rows += [
                ("re1", "fleetmedic scan --jobs 1 (re+bytes.count)", "standard library only"),
                ("re", f"fleetmedic scan (auto: --jobs {cpus}) (re+bytes.count)", ""),
            ]
        rows.append(("lib", f"Scanner.scan_binary (library, {engine})", f"{lib_findings} findings"))
        print(f"{'':58s} {'wall':>7s} {'MB/s':>6s} {'cpu':>7s}")
        for key, label, note in rows:
            wall, cpu = best[key]
            print(f"{label:58s} {wall:6.2f}s {mb / wall:6.0f} {cpu:6.2f}s  {note}")
        gw, gc = best["grep"]
        named = [("cli1", "CLI one process"), ("cli", "CLI default")]
        if compare:
            named += [("re1", "CLI one process (re)"), ("re", "CLI default (re)")]
        named.append(("lib", "library"))
        print(
            f"ratio to grep's speed ({len(greps)} greps, the faster; wall, cpu in brackets): "
            + ", ".join(f"{n} {gw / best[k][0]:.2f}x ({gc / best[k][1]:.2f}x)" for k, n in named)
            + f"  (target: CLI one process >= {args.target:.1f}x)"
        )
        one = statistics.median(paired)
        print(f"load average after: {_load()}")
        print(
            f"CLI start-up (an empty file, best of {len(paired)}): {best['start'][1]:.3f}s CPU, "
            f"{best['start'][1] / gc:.0%} of grep's CPU for the whole {mb:.0f} MB"
        )
        print(
            f"issue 12 ({mb:.0f} MB, wall time against grep in this run): "
            f"CLI one process {gw / best['cli1'][0]:.2f}x (best of each), "
            f"CLI default (--jobs {cpus}) {gw / best['cli'][0]:.2f}x"
        )
        print(
            f"issue 39: CLI one process / grep, median of {len(paired)} paired rounds: {one:.2f}x "
            f"(rounds: {', '.join(f'{r:.2f}' for r in paired)}; target >= {args.target:.1f}x)"
        )
        if os.getloadavg()[0] > (os.cpu_count() or 1):
            print(
                "note: other work shares the machine; wall figures are noisy, the cpu ratio "
                "is steadier"
            )
        if args.smoke:
            print("smoke: every step ran and the scans agree")
        elif one < args.target:
            print(
                f"MISSED: CLI one process {one:.2f}x grep, target {args.target:.1f}x",
                file=sys.stderr,
            )
            failed = True
    finally:
        if args.keep or args.log:
            print(f"kept {path if args.log else workdir}")
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
