"""Network throughput: an iperf3 client run against a configured peer.

Why iperf3 and not an HTTP download: it measures the link itself (memory to
memory TCP, no disk, no web server, no file of the right size to keep around),
it is one Debian package on both ends, its ``-J`` output is stable JSON, and a
peer can be any node or bastion running ``iperf3 -s``. The figure used is
what the receiver got (``end.sum_received``), so shaping or loss anywhere on
the path counts.

Verdicts: below ``min_mbps`` is a problem. A peer that cannot be measured
(refused, busy, unreachable) is ``unknown``: a down peer says nothing about
this node, and a node whose link is truly dead also loses its API server
connection, which Kubernetes reports on its own. iperf3 servers take one
client at a time, so "busy" is retried with jitter inside the deadline, then
the next peer is tried.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections.abc import Mapping
from typing import Any

from fleetmedic.checks.base import CheckResult, ok, problem, unknown, with_duration
from fleetmedic.checks.config import CheckConfig
from fleetmedic.checks.proc import run_bounded

NAME = "network.throughput"
CONNECT_TIMEOUT = 3.0  # seconds iperf3 may spend connecting (--connect-timeout)
SLACK = 3.0  # seconds beyond the test for setup, the results exchange, exit


def split_peer(peer: str, default_port: int) -> tuple[str, int]:
    """ "host", "host:port", "[v6addr]:port" or a bare IPv6 address -> (host, port)."""
    if peer.startswith("["):
        host, _, rest = peer[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default_port
    if peer.count(":") == 1:
        host, port = peer.split(":")
        return host, int(port)
    return peer, default_port


def budget(cfg: CheckConfig) -> float:
    """The probe's hard limit: at least one full measurement must fit."""
    return max(cfg.timeout, cfg.network.duration + CONNECT_TIMEOUT + SLACK)


def measure(
    iperf3: str,
    host: str,
    port: int,
    cfg: CheckConfig,
    timeout: float,
    env: Mapping[str, str] | None = None,
) -> tuple[float | None, str]:
    """One iperf3 run: (Mbit/s received, "") or (None, why it failed)."""
    net = cfg.network
    argv = [
        iperf3,
        "-c",
        host,
        "-p",
        str(port),
        "-t",
        f"{net.duration:g}",
        "-J",
        "--connect-timeout",
        str(int(CONNECT_TIMEOUT * 1000)),
        "-P",
        str(net.parallel),
    ]
    if net.reverse:
        argv.append("-R")
    run = run_bounded(argv, timeout, env=env, key=f"iperf3:{host}:{port}")
    if run.timed_out or run.error:
        return None, run.describe()
    mbps, why = parse_iperf3(run.stdout)
    return (mbps, "") if mbps is not None else (None, why or run.describe())


def parse_iperf3(text: str) -> tuple[float | None, str]:
    """iperf3 -J output -> (Mbit/s the receiver got, "") or (None, iperf3's error)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None, ""
    if not isinstance(data, dict):
        return None, "iperf3 printed no JSON object"
    if data.get("error"):
        return None, str(data["error"])
    end = data.get("end") or {}
    summary = end.get("sum_received") or end.get("sum") or {}
    bps = summary.get("bits_per_second")
    if not isinstance(bps, (int, float)):
        return None, "iperf3 printed no receiver summary"
    return bps / 1e6, ""


def run(cfg: CheckConfig, env: Mapping[str, str] | None = None) -> list[CheckResult]:
    net = cfg.network
    if not net.peers:
        return []
    start = time.monotonic()
    deadline = start + budget(cfg)
    path = (env if env is not None else os.environ).get("PATH")
    iperf3 = shutil.which("iperf3", path=path)
    if not iperf3:
        return [unknown(NAME, "iperf3 is not installed", "network")]
    direction = "peer->node" if net.reverse else "node->peer"
    failures: list[str] = []
    for peer in net.peers:
        host, port = split_peer(peer, net.port)
        while True:
            remaining = deadline - time.monotonic()
            if remaining < net.duration + 1:
                failures.append(f"{peer}: no time left")
                break
            mbps, why = measure(iperf3, host, port, cfg, remaining, env)
            if mbps is not None:
                ev: dict[str, Any] = {
                    "peer": peer,
                    "mbps": round(mbps, 1),
                    "min_mbps": net.min_mbps,
                    "direction": direction,
                    "duration": net.duration,
                    "tried": failures,
                }
                elapsed = time.monotonic() - start
                if mbps < net.min_mbps:
                    r = problem(
                        NAME,
                        f"{mbps:.0f} Mbit/s to {peer} ({direction}), below {net.min_mbps:g}",
                        "network",
                        **ev,
                    )
                else:
                    r = ok(
                        NAME,
                        f"{mbps:.0f} Mbit/s to {peer} ({direction}), threshold {net.min_mbps:g}",
                        "network",
                        **ev,
                    )
                return with_duration([r], elapsed)
            if "busy" in why:
                time.sleep(random.uniform(0.2, 1.0))  # another node is measuring: retry
                continue
            failures.append(f"{peer}: {why}")
            break
    return with_duration(
        [
            unknown(
                NAME, "no peer could be measured: " + "; ".join(failures), "network", tried=failures
            )
        ],
        time.monotonic() - start,
    )
