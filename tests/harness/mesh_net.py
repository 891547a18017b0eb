"""Network plumbing and bookkeeping of test Receptor meshes (tests/harness/mesh.py).

An execution node lives in network namespace ``fmrx-<mesh>-<node id>`` with one veth per
fleet bridge its share is on: host end ``fmrx<octet>e<k>`` on bridge ``fmbr<octet>``,
node end ``eth<j>`` at ``192.168.<octet>.<k>`` (k in 2..9, below the fleet's nodes at
.11 and up), with a MAC derived from that address. iptables in the namespace let it
reach only its share and the host end of its bridges; it has no default route.

Each mesh is recorded in ``$FLEETMEDIC_MESHES/<name>/mesh.json`` with its owner;
:func:`cleanup_stale` removes what meshes of dead owners left (processes, namespaces,
veths), and namespaces or veths of this shape that no live mesh owns. The fleet
harness's own sweep leaves these names alone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.harness import fleet_net as net
from tests.harness import procs
from tests.harness.fleet_sys import kill_and_wait, proc_alive

MESH_ROOT = Path(os.environ.get("FLEETMEDIC_MESHES", "/run/fleetmedic/meshes"))
NETNS_PREFIX = "fmrx-"
HOST_IDS = range(2, 10)  # execution nodes' addresses on a fleet bridge: .2 .. .9
LINK_RE = re.compile(r"^fmrx(\d{3})e(\d)$")


class MeshError(RuntimeError):
    """The test mesh could not be built, started or driven. One line."""


def log(msg: str) -> None:
    print(f"[mesh] {msg}", file=sys.stderr, flush=True)


@dataclass
class Link:
    octet: int
    host_veth: str
    ifname: str
    address: str

    @property
    def mac(self) -> str:
        """Derived from the address: a later mesh on the same address looks the same
        to the host's and the fleet nodes' neighbour caches."""
        return f"02:66:6d:78:{self.octet:02x}:{int(self.address.rsplit('.', 1)[1]):02x}"


def allocate_links(octets: Iterable[int], taken: set[tuple[int, int]]) -> list[Link]:
    """One free address per fleet subnet (adds them to ``taken``). Call under lock()."""
    links = []
    for j, octet in enumerate(sorted(set(octets))):
        free = [k for k in HOST_IDS if (octet, k) not in taken]
        if not free:
            raise MeshError(f"no free execution node address on 192.168.{octet}.0/24")
        taken.add((octet, free[0]))
        links.append(Link(octet, f"fmrx{octet}e{free[0]}", f"eth{j}", f"192.168.{octet}.{free[0]}"))
    return links


def taken_addresses() -> set[tuple[int, int]]:
    return {
        (int(m.group(1)), int(m.group(2))) for ln in net.list_links() if (m := LINK_RE.match(ln))
    }


def ipt(netns: str, *args: str, check: bool = True) -> None:
    p = subprocess.run(
        ["ip", "netns", "exec", netns, "iptables", "-w", *args], capture_output=True, text=True
    )
    if check and p.returncode != 0:
        raise MeshError(f"iptables {' '.join(args)} in {netns}: {net.one_line(p.stderr)}")


def plumb(netns: str, links: list[Link], share: Iterable[Any]) -> None:
    """The namespace, its veths and addresses, and a firewall that lets it reach only
    ``share`` (fleet nodes) and the host end of its bridges (where the controller is)."""
    net.ip("netns", "add", netns)
    net.ip("-n", netns, "link", "set", "lo", "up")
    for lk in links:
        net.ip(
            "link",
            "add",
            lk.host_veth,
            "type",
            "veth",
            "peer",
            "name",
            lk.ifname,
            "address",
            lk.mac,
            "netns",
            netns,
        )
        net.ip("link", "set", lk.host_veth, "master", net.bridge_name(lk.octet), "up")
        net.ip("-n", netns, "addr", "add", f"{lk.address}/24", "dev", lk.ifname)
        net.ip("-n", netns, "link", "set", lk.ifname, "up")
        net.ip("neigh", "flush", "to", lk.address, check=False)
    ipt(netns, "-A", "OUTPUT", "-o", "lo", "-j", "ACCEPT")
    ipt(netns, "-A", "OUTPUT", "-m", "state", "--state", "ESTABLISHED,RELATED", "-j", "ACCEPT")
    for lk in links:
        ipt(netns, "-A", "OUTPUT", "-d", net.host_address(lk.octet), "-j", "ACCEPT")
    for n in share:
        ipt(netns, "-A", "OUTPUT", "-d", n.address, "-j", "ACCEPT")
    ipt(netns, "-A", "OUTPUT", "-j", "REJECT", "--reject-with", "icmp-admin-prohibited")


def lock():
    return procs.exclusive(MESH_ROOT, "meshes.lock")


def read_record(d: Path) -> dict | None:
    try:
        return json.loads((d / "mesh.json").read_text())
    except (OSError, ValueError):
        return None


def teardown(rec: dict, remove_dir: bool) -> None:
    """Kill every process in the mesh's namespaces, delete them and their veths."""
    for ex in rec.get("exec_nodes", []):
        kill_and_wait(net.netns_pids(ex["netns"]))
        net.delete_netns(ex["netns"])
        for v in ex.get("veths", []):
            net.delete_link(v)
    if remove_dir:
        shutil.rmtree(rec["dir"], ignore_errors=True)


def cleanup_stale() -> list[str]:
    """Tear down meshes whose owner died, and mesh-shaped netns/veths no live mesh
    owns. Call under :func:`lock`. Returns what was removed."""
    removed, live_ns, live_links = [], set(), set()
    if MESH_ROOT.exists():
        for d in sorted(p for p in MESH_ROOT.iterdir() if p.is_dir()):
            rec = read_record(d)
            owner = (rec or {}).get("owner")
            if rec and owner and proc_alive(owner["pid"], owner["start"]):
                for ex in rec["exec_nodes"]:
                    live_ns.add(ex["netns"])
                    live_links.update(ex["veths"])
                continue
            if rec:
                teardown(rec, remove_dir=True)
                removed.append(f"mesh {d.name}")
            elif time.time() - d.stat().st_mtime > 3600:
                shutil.rmtree(d, ignore_errors=True)  # a stopped mesh's logs, after an hour
    for ns in net.list_netns():
        if ns.startswith(NETNS_PREFIX) and ns not in live_ns:
            kill_and_wait(net.netns_pids(ns))
            net.delete_netns(ns)
            removed.append(f"netns {ns}")
    for link in net.list_links():
        if LINK_RE.match(link) and link not in live_links:
            net.delete_link(link)
            removed.append(f"link {link}")
    if removed:
        log(f"cleaned up leftovers: {', '.join(removed)}")
    return removed
