"""Network plumbing of the test fleet: one private bridge per fleet, one network
namespace per node with a veth whose node end is ``eth0``.

Names are derived from the fleet's third address octet (240..254), so leftovers of a
crashed run can be found by pattern alone:

- bridge ``fmbr<octet>`` holding ``192.168.<octet>.1/24``;
- netns ``fm<octet>-<node>``, e.g. ``fm240-node-1``;
- host-side veth ``fm<octet>v<index>``, e.g. ``fm240v1`` (the node side is ``eth0``).

Shaping uses ``tc tbf`` (rate limit). This kernel has no ``netem``, so added delay and
loss are not available (known gap).
"""

from __future__ import annotations

import re
import subprocess

OCTETS = range(240, 255)
_NETNS_RE = re.compile(r"^fm(\d{3})-")
_LINK_RE = re.compile(r"^fm(?:br)?(\d{3})(?:v\d+)?$")


class NetError(RuntimeError):
    """An ``ip``/``tc`` command failed; the message is one line."""


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run(["ip", *args], check)


def _run(cmd: list[str], check: bool) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise NetError(f"{' '.join(cmd)}: {one_line(p.stderr) or p.returncode}")
    return p


def one_line(text: str) -> str:
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def bridge_name(octet: int) -> str:
    return f"fmbr{octet}"


def netns_name(octet: int, node: str) -> str:
    return f"fm{octet}-{node}"


def veth_name(octet: int, index: int) -> str:
    return f"fm{octet}v{index}"


def host_address(octet: int) -> str:
    return f"192.168.{octet}.1"


def node_address(octet: int, index: int) -> str:
    return f"192.168.{octet}.{10 + index}"


def create_bridge(octet: int) -> None:
    br = bridge_name(octet)
    ip("link", "add", br, "type", "bridge")
    ip("addr", "add", f"{host_address(octet)}/24", "dev", br)
    ip("link", "set", br, "up")


def create_node_net(octet: int, index: int, node: str) -> None:
    """Netns + veth pair; the node end is ``eth0`` with its address, up."""
    ns, veth = netns_name(octet, node), veth_name(octet, index)
    ip("netns", "add", ns)
    ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
    ip("link", "set", veth, "master", bridge_name(octet), "up")
    batch = (
        f"link set lo up\n"
        f"addr add {node_address(octet, index)}/24 dev eth0\n"
        f"link set eth0 up\n"
        f"route replace default via {host_address(octet)}\n"
    )
    p = subprocess.run(["ip", "-n", ns, "-batch", "-"], input=batch, capture_output=True, text=True)
    if p.returncode != 0:
        raise NetError(f"ip -n {ns} -batch: {one_line(p.stderr)}")


def set_node_eth0(octet: int, node: str, up: bool) -> None:
    """The node's own NIC: down while the node is powered off/rebooting, like a real host."""
    ns = netns_name(octet, node)
    ip("-n", ns, "link", "set", "eth0", "up" if up else "down", check=False)
    if up:
        ip("-n", ns, "route", "replace", "default", "via", host_address(octet), check=False)


def set_link(octet: int, index: int, up: bool) -> None:
    """Fault injection: the host end of the node's cable (``ip link set <veth> down``)."""
    ip("link", "set", veth_name(octet, index), "up" if up else "down")


def throttle(
    octet: int,
    index: int,
    node: str,
    rate: str | None,
    burst: str = "32kbit",
    latency: str = "400ms",
) -> None:
    """Rate-limit both directions with tbf (``rate`` like ``"10mbit"``); None removes it."""
    for cmd in (["tc"], ["tc", "-n", netns_name(octet, node)]):
        dev = veth_name(octet, index) if len(cmd) == 1 else "eth0"
        if rate is None:
            _run([*cmd, "qdisc", "del", "dev", dev, "root"], check=False)
        else:
            _run(
                [
                    *cmd,
                    "qdisc",
                    "replace",
                    "dev",
                    dev,
                    "root",
                    "tbf",
                    "rate",
                    rate,
                    "burst",
                    burst,
                    "latency",
                    latency,
                ],
                check=True,
            )


def netns_pids(ns: str) -> list[int]:
    p = ip("netns", "pids", ns, check=False)
    return [int(x) for x in p.stdout.split()] if p.returncode == 0 else []


def list_netns() -> list[str]:
    p = ip("netns", "list", check=False)
    return [line.split()[0] for line in p.stdout.splitlines() if line.strip()]


def list_links() -> list[str]:
    p = ip("-o", "link", "show", check=False)
    names = []
    for line in p.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@")[0])
    return names


def ours_netns() -> dict[str, int]:
    """Every fleet netns on the machine -> its octet."""
    return {ns: int(m.group(1)) for ns in list_netns() if (m := _NETNS_RE.match(ns))}


def ours_links() -> dict[str, int]:
    """Every fleet bridge/host veth on the machine -> its octet."""
    return {name: int(m.group(1)) for name in list_links() if (m := _LINK_RE.match(name))}


def delete_netns(ns: str) -> None:
    ip("netns", "del", ns, check=False)


def delete_link(name: str) -> None:
    ip("link", "del", name, check=False)
