"""Host-side resources of test fleets: processes, mounts, liveness, teardown and the
sweep of leftovers from crashed runs. Works on fleet records (``fleet.json`` dicts) and
directories only, so the supervisor, the fixtures and the CLI share it.

A fleet is *live* while its keeper runs: the supervisor once started, before that the
process creating it. Everything of a fleet that is not live is stale and removed by
``cleanup_stale`` (under a lock, before every new fleet): its processes, mounts, netns,
veths, bridge and directory. Fleet-shaped network objects (``fm<octet>...``) that no
live fleet owns are removed too.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.harness import fleet_cgroup, procs
from tests.harness import fleet_net as net

FLEETS_ROOT = Path(os.environ.get("FLEETMEDIC_FLEETS", "/run/fleetmedic/fleets"))
FAILED_KEEP_S = 24 * 3600  # dirs of fleets that failed to start keep their logs this long


def log(msg: str) -> None:
    print(f"[fleet] {msg}", file=sys.stderr, flush=True)


# --- processes -------------------------------------------------------------------------


def proc_start(pid: int) -> int | None:
    """Start time of a process (clock ticks since boot), to tell a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def proc_alive(pid: int | None, start: int | None) -> bool:
    return bool(pid) and _exists(pid) and proc_start(pid) == start


def me() -> dict:
    return {"pid": os.getpid(), "start": proc_start(os.getpid())}


def _exists(pid: int) -> bool:
    """Running (a zombie counts as gone; if it is our child, reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    if state == "Z":
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        return False
    return True


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            break
    return pids


def procs_referencing(path: Path) -> list[int]:
    """Processes whose command line names ``path`` or a file under it (nspawn, the
    supervisor, ssh control masters), except this process and its ancestors."""
    needle, skip, found = str(path), _ancestors(), []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) in skip:
            continue
        try:
            args = (d / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(a == needle or needle + "/" in a for a in args) and _exists(int(d.name)):
            found.append(int(d.name))
    return found


def kill_and_wait(pids: list[int], timeout: float = 5.0) -> list[int]:
    """SIGKILL ``pids``; returns those still there after ``timeout``."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while True:
        pids = [p for p in pids if _exists(p)]
        if not pids or time.monotonic() > deadline:
            return pids
        time.sleep(0.05)


def stop_process(proc: dict | None, timeout: float) -> None:
    """SIGTERM a recorded process ({pid, start}), SIGKILL it after ``timeout``."""
    if not proc or not proc_alive(proc["pid"], proc["start"]):
        return
    os.kill(proc["pid"], signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while proc_alive(proc["pid"], proc["start"]):
        if time.monotonic() > deadline:
            log(f"pid {proc['pid']} did not stop within {timeout:.0f} s, killing it")
            kill_and_wait([proc["pid"]])
            break
        time.sleep(0.05)


# --- mounts ----------------------------------------------------------------------------


def _unescape(s: str) -> str:
    return (
        s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
    )


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below ``path`` in this mount namespace, deepest first."""
    prefix, found = str(path), []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mp = _unescape(line.split()[4])
        if mp == prefix or mp.startswith(prefix + "/"):
            found.append(mp)
    return sorted(found, key=lambda m: m.count("/"), reverse=True)


def umount_all(path: Path) -> None:
    for mp in mounts_under(path):
        if subprocess.run(["umount", mp], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", mp], capture_output=True)


# --- liveness, teardown, leftovers -----------------------------------------------------


def is_live(rec: dict) -> bool:
    keeper = rec.get("supervisor") or rec.get("creator")
    return bool(keeper) and proc_alive(keeper["pid"], keeper["start"])


def teardown_resources(
    fleet_dir: Path, rec: dict | None, *, by_supervisor: bool = False, keep_logs: bool = False
) -> None:
    """Remove everything a fleet holds. Idempotent; works from a partial record."""
    if rec and not by_supervisor:
        stop_process(rec.get("supervisor"), timeout=20)  # it powers the nodes off cleanly
    nodes = (rec or {}).get("nodes", [])
    # A dead fleet's subnet was free and a fleet started since may have it, with the same
    # netns, veth and bridge names: those are not ours (as in leftovers). Sweeping them
    # once tore down a live fleet's nodes mid-test.
    reused = bool(rec) and "octet" in rec and _octet_taken(rec["octet"], fleet_dir)
    if reused:
        log(f"{fleet_dir.name}: its subnet is another live fleet's now; leaving its network")
    pids = procs_referencing(fleet_dir)
    for n in nodes if not reused else ():
        pids += net.netns_pids(n["netns"])
    stuck = kill_and_wait(sorted(set(pids) - {os.getpid()}))
    if stuck:
        log(f"{fleet_dir.name}: processes {stuck} survived SIGKILL")
    umount_all(fleet_dir)
    for n in nodes:
        stuck_cg = fleet_cgroup.remove(n.get("cgroups", []))
        if stuck_cg:
            log(f"{fleet_dir.name}: cgroups left: {', '.join(stuck_cg)}")
        if not reused:
            net.delete_netns(n["netns"])
            net.delete_link(n["veth"])
    if rec and "octet" in rec and not reused:
        net.delete_link(net.bridge_name(rec["octet"]))
    if mounts_under(fleet_dir):
        log(f"{fleet_dir.name}: mounts left, not removing {fleet_dir}")
        return
    if keep_logs:

        def keep(p: Path) -> bool:  # the fleet's and each node's own logs, not the nodes' files
            rel = p.relative_to(fleet_dir).parts
            return (len(rel) == 1 or (len(rel) == 3 and rel[0] == "nodes")) and (
                p.suffix == ".log" or p.name in ("fleet.json", "status.json")
            )

        for p in sorted(fleet_dir.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if p.is_symlink() or not p.is_dir():
                if not keep(p):
                    p.unlink()
            elif not any(p.iterdir()):
                p.rmdir()
        if rec:
            rec = {**rec, "state": "failed", "supervisor": None, "failed_at": time.time()}
            (fleet_dir / "fleet.json").write_text(json.dumps(rec, indent=1))
    else:
        shutil.rmtree(fleet_dir, ignore_errors=True)


def leftovers(fleet_dir: Path, rec: dict | None) -> list[str]:
    """What of a fleet is still there (empty after a clean teardown)."""
    left = [f"mount {m}" for m in mounts_under(fleet_dir)]
    left += [f"process {p}" for p in procs_referencing(fleet_dir)]
    if rec:
        # Once this fleet's directory is gone its subnet is free: a fleet another run
        # started meanwhile has the same netns, veth and bridge names. Those are not ours.
        reused = _octet_taken(rec["octet"], fleet_dir)
        all_ns, links = set(net.list_netns()), set(net.list_links())
        for n in rec.get("nodes", []):
            left += [f"cgroup {c}" for c in n.get("cgroups", []) if Path(c).exists()]
            if n["netns"] in all_ns and not reused:
                left.append(f"netns {n['netns']}")
            if n["veth"] in links and not reused:
                left.append(f"veth {n['veth']}")
        if net.bridge_name(rec["octet"]) in links and not reused:
            left.append(f"bridge {net.bridge_name(rec['octet'])}")
        for proc in (rec.get("supervisor"),):
            if proc and proc_alive(proc["pid"], proc["start"]):
                left.append(f"supervisor {proc['pid']}")
    if fleet_dir.exists():
        left.append(f"dir {fleet_dir}")
    return left


def _octet_taken(octet: int, but: Path) -> bool:
    """Another live fleet (than the one in ``but``) has this subnet."""
    if not FLEETS_ROOT.exists():
        return False
    for d in FLEETS_ROOT.iterdir():
        rec = read_record(d) if d != but and d.is_dir() else None
        if rec and rec.get("octet") == octet and is_live(rec):
            return True
    return False


def fleets_lock():
    return procs.exclusive(FLEETS_ROOT, "fleets.lock")


def read_record(fleet_dir: Path) -> dict | None:
    try:
        return json.loads((fleet_dir / "fleet.json").read_text())
    except (OSError, ValueError):
        return None


def cleanup_stale(prefix: str = "") -> list[str]:
    """Tear down every fleet (name starting with ``prefix``) that is no longer live, and
    fleet-shaped netns/links no live fleet owns. Call it under ``fleets_lock()``.
    Returns what was removed, one string each."""
    removed, live_octets = [], set()
    if FLEETS_ROOT.exists():
        for d in sorted(p for p in FLEETS_ROOT.iterdir() if p.is_dir()):
            rec = read_record(d)
            if rec and is_live(rec):
                owner = rec.get("owner")
                if rec.get("supervisor") and owner and not proc_alive(owner["pid"], owner["start"]):
                    stop_process(rec["supervisor"], timeout=25)  # it is tearing down already
                else:
                    live_octets.add(rec["octet"])
                    continue
            if not d.name.startswith(prefix):
                if rec and "octet" in rec:
                    live_octets.add(rec["octet"])  # not ours to judge; leave its network alone
                continue
            if rec and rec.get("state") == "failed" and not mounts_under(d):
                if time.time() - rec.get("failed_at", 0) < FAILED_KEEP_S:
                    continue  # only logs left; keep them a while for a post-mortem
                shutil.rmtree(d, ignore_errors=True)
                continue
            if d.exists():
                log(f"removing stale fleet {d.name} (left by a crashed or killed run)")
                teardown_resources(d, rec)
                removed.append(f"fleet {d.name}")
    for ns, octet in net.ours_netns().items():
        if octet not in live_octets:
            kill_and_wait(net.netns_pids(ns))
            net.delete_netns(ns)
            removed.append(f"netns {ns}")
    for link, octet in sorted(net.ours_links().items(), key=lambda kv: "br" in kv[0]):
        if octet not in live_octets:
            net.delete_link(link)
            removed.append(f"link {link}")
    if removed:
        log(f"cleaned up leftovers: {', '.join(removed)}")
    return removed
