#!/usr/bin/env python3
"""Reproduce stock Receptor 1.4.4's link wedge (tests/receptor/patches/UPSTREAM.md) in
seconds, without Ansible: a controller node and one execution node on loopback (no TLS),
``--workers`` threads each submitting a short unit (a script that echoes its input and
three lines 0.4 s apart), reading its results and force-releasing it, as the receptor
executor does. ``--mode direct`` also reads each unit's results straight from the
execution node (``connect exec control``, then ``work results`` of the remote unit), as
``direct_results`` does; ``direct-serial`` does that for one unit at a time;
``direct-started`` opens it only once the unit has started there.

Stops at the first wedge (a read stuck for 10 s, or ``Timing out connection`` in a log)
or after ``--seconds``, and prints one JSON line: units done, seconds, why it ended, the
logs' directory. ``DUMP=1`` makes both receptors print their goroutines into their logs
on a wedge (SIGQUIT).

    .venv/bin/python tests/receptor/wedge_repro.py --mode direct --workers 8
    .venv/bin/python tests/receptor/wedge_repro.py --patched --mode direct

Measured on 2 CPUs (2026-11-26): stock, 8 workers, with direct reads: wedged within
16 s in 5 runs of 5 (3 direct, 1 direct-serial, 1 direct-started); direct at 2 and 1
workers: none in 3 x 30 s; default at 8: none in 150 s (478 units); patched, direct, 8:
none (2 runs of 20 s, 128 units).
Run it under ``flock /work/.heavy.lock`` on shared machines: it keeps both CPUs busy.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import BinaryIO

import yaml
from receptorctl.socket_interface import ReceptorControl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.harness.mesh import find_binaries

WORK = "#!/bin/sh\ncat\nfor i in 1 2 3; do echo line $i; sleep 0.4; done\necho done\n"
MODES = ("default", "direct", "direct-serial", "direct-started")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=MODES, default="direct")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--port", type=int, default=27300)
    ap.add_argument("--patched", action="store_true", help="the build with tests/receptor/patches")
    args = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="rxwedge-"))
    script = d / "work.sh"
    script.write_text(WORK)
    script.chmod(0o755)
    configs = {
        "exec": [
            {"node": {"id": "exec", "datadir": str(d / "exec-data")}},
            {"tcp-listener": {"bindaddr": "127.0.0.1", "port": args.port}},
            {"control-service": {"service": "control", "filename": str(d / "exec.sock")}},
            {"work-command": {"worktype": "sh", "command": str(script)}},
        ],
        "ctl": [
            {"node": {"id": "ctl", "datadir": str(d / "ctl-data")}},
            {"tcp-peer": {"address": f"127.0.0.1:{args.port}"}},
            {"control-service": {"service": "control", "filename": str(d / "ctl.sock")}},
        ],
    }
    receptor = str(find_binaries(patched=args.patched).receptor)
    procs = []
    for name, cfg in configs.items():
        (d / f"{name}.yml").write_text(yaml.safe_dump(cfg))
        with open(d / f"{name}.log", "wb") as log:
            argv = [receptor, "--config", str(d / f"{name}.yml")]
            procs.append(subprocess.Popen(argv, stdout=log, stderr=log))
        while not (d / f"{name}.sock").exists():
            time.sleep(0.05)
    sock = str(d / "ctl.sock")
    while "exec" not in (_ask(sock, "status").get("RoutingTable") or {}):
        time.sleep(0.1)

    stop, serial, lock = threading.Event(), threading.Lock(), threading.Lock()
    done, failed = [0], []

    def worker() -> None:
        while not stop.is_set():
            try:
                _one(sock, args.mode, serial)
                with lock:
                    done[0] += 1
            except Exception as exc:  # any failure ends the run: it is the finding
                failed.append(f"{type(exc).__name__}: {exc}")
                stop.set()

    t0 = time.monotonic()
    for _ in range(args.workers):
        threading.Thread(target=worker, daemon=True).start()
    why = "time"
    while time.monotonic() - t0 < args.seconds and not stop.is_set():
        time.sleep(0.5)
        logs = b"".join((d / f"{n}.log").read_bytes() for n in configs)
        if b"Timing out connection" in logs:
            why = "Timing out connection"
            break
    why = failed[0] if failed else why
    stop.set()
    result = {
        "mode": args.mode,
        "workers": args.workers,
        "receptor": "patched" if args.patched else "stock",
        "units": done[0],
        "seconds": round(time.monotonic() - t0, 1),
        "end": why[:160],
        "logs": str(d),
    }
    print(json.dumps(result), flush=True)
    dump = os.environ.get("DUMP") and why != "time"
    for p in procs:
        p.send_signal(signal.SIGQUIT if dump else signal.SIGTERM)
    for p in procs:
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
    os._exit(0 if why == "time" else 1)  # workers may be stuck in reads: do not join them


def _ask(sock: str, command: str) -> dict:
    rc = ReceptorControl(f"unix:{sock}")
    try:
        return rc.simple_command(command)
    finally:
        rc.close()


def _read_all(s: socket.socket, f: BinaryIO) -> bytes:
    s.settimeout(10)
    out = b""
    while chunk := f.read(65536):
        out += chunk
    f.close()
    s.close()
    return out


def _direct(sock: str, remote: str) -> bytes:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(sock)
    f = s.makefile("rb")
    f.readline()
    s.sendall(b"connect exec control\n")
    for want in (b"Connecting", b"Receptor Control, node exec"):
        line = f.readline()
        if not line.startswith(want):
            raise RuntimeError(f"connect: {line!r}")
    req = {"command": "work", "subcommand": "results", "unitid": remote, "startpos": 0}
    s.sendall(json.dumps(req).encode() + b"\n")
    line = f.readline()
    if not line.startswith(b"Streaming"):
        raise RuntimeError(f"work results: {line!r}")
    return _read_all(s, f)


def _one(sock: str, mode: str, serial: threading.Lock) -> None:
    rc = ReceptorControl(f"unix:{sock}")
    unit = rc.submit_work("sh", io.BytesIO(b"x" * 2000 + b"\n"), node="exec")["unitid"]
    rc.close()
    if mode != "default":
        remote, t0 = None, time.monotonic()
        while not remote and time.monotonic() - t0 < 10:
            extra = _ask(sock, f"work status {unit}").get("ExtraData") or {}
            started = extra.get("RemoteStarted") or mode != "direct-started"
            remote = extra.get("RemoteUnitID") if started else None
            if not remote:
                time.sleep(0.05)
        if not remote:
            raise RuntimeError(f"unit {unit}: no remote unit ID after 10 s")
        if mode != "direct-serial" or serial.acquire(blocking=False):
            try:
                out = _direct(sock, remote)
            finally:
                if mode == "direct-serial":
                    serial.release()
            if b"done" not in out:
                raise RuntimeError(f"unit {unit}: direct stream ended early")
    rc = ReceptorControl(f"unix:{sock}")
    s, f = rc.get_work_results(unit, return_socket=True, return_sockfile=True)
    if b"done" not in _read_all(s, f):
        raise RuntimeError(f"unit {unit}: stream ended early")
    t0 = time.monotonic()
    while time.monotonic() - t0 < 10:
        if _ask(sock, f"work status {unit}")["StateName"] not in ("Pending", "Running"):
            break
        time.sleep(0.25)
    _ask(sock, f"work force-release {unit}")


if __name__ == "__main__":
    sys.exit(main())
