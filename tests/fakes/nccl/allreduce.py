#!/usr/bin/env python3
"""Fake ``all_reduce_perf`` of nccl-tests (NVIDIA) and rccl-tests (AMD, the same program
and output): a single-node all-reduce across the node's GPUs whose bus bandwidth comes
from the node's scenario, so a burn-in can be judged against a hardware profile.

    nvml.json (``$FLEETMEDIC_FAKE_NVML``, else /var/lib/fleetmedic-test/nvml.json) when it
    exists, else amd.json (``$FLEETMEDIC_FAKE_AMD``): top-level ``busbw_gbps`` is the bus
    bandwidth at large sizes (default 360: an 8x H100 NVLink node's order of magnitude),
    ``gpus`` the devices (``-g`` caps them).

The output follows the published format (nccl-tests README and public runs): the
``# nThread ... nGpus ...`` header, ``# Using devices`` with one ``#  Rank`` line per GPU,
the out-of-place / in-place table (size, count, type, redop, root, time, algbw, busbw,
#wrong), ``# Out of bounds values : 0 OK`` and ``# Avg bus bandwidth    : X`` (the mean of
every row's busbw, as nccl-tests computes it). Sizes run from ``-b`` to ``-e`` by factor
``-f``; busbw ramps up with the size (latency dominates small messages) to ``busbw_gbps``.
Without a scenario file it fails as the real one does without a driver. Standard library
only: the test fleet's nodes run it with their own python3.
"""

from __future__ import annotations

import json
import os
import socket
import sys

UNITS = {"K": 1024, "M": 1024**2, "G": 1024**3}
TABLE_HEAD = (
    "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place" + " " * 10,
    "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    "     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       "
    "     (us)  (GB/s)  (GB/s)       ",
)


def size(text: str) -> int:
    text = text.strip().upper()
    return int(float(text[:-1]) * UNITS[text[-1]]) if text[-1:] in UNITS else int(text)


def scenario() -> tuple[dict, str] | None:
    for env, default, vendor in (
        ("FLEETMEDIC_FAKE_NVML", "/var/lib/fleetmedic-test/nvml.json", "nvidia"),
        ("FLEETMEDIC_FAKE_AMD", "/var/lib/fleetmedic-test/amd.json", "amd"),
    ):
        path = os.environ.get(env) or default
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return data, vendor
    return None


def main(argv: list[str]) -> int:
    opts = {"-b": "32M", "-e": "32M", "-f": "2", "-g": "0", "-n": "20", "-w": "5"}
    k = 0
    while k < len(argv):
        if argv[k] in opts and k + 1 < len(argv):
            opts[argv[k]] = argv[k + 1]
            k += 2
        else:
            k += 1
    found = scenario()
    if found is None:
        sys.stdout.write(
            f"{socket.gethostname()}: Test CUDA failure common.cu:1011 'no CUDA-capable device "
            "is detected'\n .. all_reduce_perf: Test failure common.cu:1134\n"
        )
        return 1
    sc, vendor = found
    gpus = [g if isinstance(g, dict) else {} for g in sc.get("gpus") or []]
    n = min(len(gpus), int(opts["-g"]) or len(gpus))
    peak = float(sc.get("busbw_gbps", 360.0))
    lo, hi, factor = size(opts["-b"]), size(opts["-e"]), max(2, int(opts["-f"]))
    out = [
        f"# nThread 1 nGpus {n} minBytes {lo} maxBytes {hi} step: {factor}(factor) warmup "
        f"iters: {opts['-w']} iters: {opts['-n']} agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    host = socket.gethostname()
    for i in range(n):
        name = gpus[i].get("name") or (
            "NVIDIA H100 80GB HBM3" if vendor == "nvidia" else "AMD Instinct MI300X"
        )
        bus = f"0x{0x18 + 0x10 * i:02x}"
        out.append(f"#  Rank {i:>2} Group  0 Pid   4242 on {host} device {i:>2} [{bus}] {name}")
    out += ["#", *TABLE_HEAD]
    busbws = []
    s = lo
    while s <= hi:
        # all-reduce moves 2(n-1)/n of the data per rank: algbw = busbw * n / (2(n-1))
        bw = peak * s / (s + 32 * 1024**2)
        alg = bw * n / (2 * (n - 1)) if n > 1 else bw
        t = s / (alg * 1e3) if alg > 0 else 0.0  # us
        busbws += [bw, bw]
        out.append(
            f"{s:>12} {s // 4:>13}     float     sum      -1 {t:>8.1f} {alg:>7.2f} {bw:>7.2f}"
            f"      0 {t:>8.1f} {alg:>7.2f} {bw:>7.2f}      0"
        )
        s *= factor
    avg = sum(busbws) / len(busbws) if busbws else 0.0
    out += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg:.4f} ", "#", ""]
    sys.stdout.write("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
