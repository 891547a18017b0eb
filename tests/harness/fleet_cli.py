"""``python -m tests.harness.fleet``: the test fleet for humans and Molecule.

    up [-n N] [--name NAME]     boot a fleet that stays up until `down` (idempotent);
                                prints where its inventory, known_hosts and key are
    down [--name NAME | --all]  tear it down (nothing left behind)
    status [--name NAME]        fleets and node states
    ssh NODE [CMD...]           ssh into a node as root (host keys checked)
    fault NODE ACTION [ARG]     hang | unhang | link-down | link-up | delay SECONDS |
                                throttle RATE | unthrottle | power-on
    cleanup                     remove leftovers of crashed runs

The fleet name defaults to $FLEETMEDIC_FLEET or "dev". Needs root.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from tests.harness import fleet as fl


def _info(f: fl.Fleet) -> dict:
    return {
        "name": f.name,
        "dir": str(f.dir),
        "subnet": f"192.168.{f.octet}.0/24",
        "host_address": f.host_address,
        "inventory": str(f.inventory),
        "known_hosts": str(f.known_hosts),
        "private_key": str(f.private_key),
        "ssh_config": str(f.ssh_config),
        "nodes": {n.name: n.address for n in f.nodes},
    }


def _print_info(f: fl.Fleet, as_json: bool) -> None:
    info = _info(f)
    if as_json:
        print(json.dumps(info, indent=1))
        return
    print(f"fleet {f.name}: {len(f)} nodes on {info['subnet']} (host {f.host_address})")
    for key in ("inventory", "known_hosts", "private_key", "ssh_config"):
        print(f"  {key + ':':13} {info[key]}")
    print(f"  {'nodes:':13} " + ", ".join(f"{k}={v}" for k, v in info["nodes"].items()))
    print(f"  {'ssh:':13} ssh -F {f.ssh_config} {f.nodes[0].name}")


def cmd_up(a) -> int:
    try:
        f = fl.attach(a.name)
        if f.status()["supervisor_alive"]:
            if len(f) != a.nodes:
                raise fl.FleetError(
                    f"fleet {a.name} is up with {len(f)} nodes, not {a.nodes}; "
                    f"run `down --name {a.name}` first"
                )
            _print_info(f, a.json)
            return 0
    except fl.FleetError as exc:
        if "no fleet named" not in str(exc):
            raise
    f = fl.start_fleet(a.nodes, a.name, owned=False, boot_timeout=a.timeout)
    _print_info(f, a.json)
    return 0


def cmd_down(a) -> int:
    names = [r["name"] for r in fl.list_fleets()] if a.all else [a.name]
    for name in names:
        try:
            fl.attach(name).down()
        except fl.FleetError as exc:
            if "no fleet named" in str(exc) and not a.all:
                print(f"fleet {name} is not up", file=sys.stderr)
                continue
            raise
    return 0


def cmd_status(a) -> int:
    recs = [r for r in fl.list_fleets() if a.name in (None, r["name"])]
    out = []
    for r in recs:
        st = fl.attach(r["name"]).status()
        st["live"] = r["live"]
        out.append(st)
    if a.json:
        print(json.dumps(out, indent=1))
        return 0
    if not out:
        print("no fleets")
    for st in out:
        owner = f", owned by pid {st['owner']['pid']}" if st.get("owner") else ""
        print(
            f"fleet {st['name']}: {st['subnet']}, {'live' if st['live'] else 'DEAD'}{owner}; "
            f"inventory {st['inventory']}"
        )
        for n in st["nodes"]:
            print(f"  {n['name']:8} {n['address']:16} {n['state']:15} boots={n.get('boots', 0)}")
    return 0


def cmd_ssh(a) -> int:
    node = fl.attach(a.name).node(a.node)
    cmd = node.ssh_command(" ".join(a.command) if a.command else None)
    os.execvp(cmd[0], cmd)


def cmd_fault(a) -> int:
    node = fl.attach(a.name).node(a.node)
    act, arg = a.action, a.arg
    if act in ("delay", "throttle") and arg is None:
        raise fl.FleetError(f"fault {act} needs an argument (seconds / rate like 10mbit)")
    {
        "hang": lambda: node.set_hang(True),
        "unhang": lambda: node.set_hang(False),
        "link-down": node.link_down,
        "link-up": node.link_up,
        "delay": lambda: node.set_boot_delay(float(arg)),
        "throttle": lambda: node.throttle(arg),
        "unthrottle": lambda: node.throttle(None),
        "power-on": node.power_on,
    }[act]()
    print(f"{a.name}/{node.name}: {act}{' ' + arg if arg else ''}")
    return 0


def cmd_cleanup(a) -> int:
    with fl.fleets_lock():
        removed = fl.cleanup_stale()
    print("removed: " + (", ".join(removed) if removed else "nothing"))
    return 0


def main(argv: list[str] | None = None) -> int:
    default = os.environ.get("FLEETMEDIC_FLEET", "dev")
    ap = argparse.ArgumentParser(
        prog="python -m tests.harness.fleet",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("up")
    p.add_argument("-n", "--nodes", type=int, default=3)
    p.add_argument("--name", default=default)
    p.add_argument(
        "--timeout", type=float, default=30.0, help="seconds for each node to reach sshd"
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_up)
    p = sub.add_parser("down")
    p.add_argument("--name", default=default)
    p.add_argument("--all", action="store_true")
    p.set_defaults(func=cmd_down)
    p = sub.add_parser("status")
    p.add_argument("--name", default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("ssh")
    p.add_argument("--name", default=default)
    p.add_argument("node")
    p.add_argument("command", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_ssh)
    p = sub.add_parser("fault")
    p.add_argument("--name", default=default)
    p.add_argument("node")
    p.add_argument(
        "action",
        choices=[
            "hang",
            "unhang",
            "link-down",
            "link-up",
            "delay",
            "throttle",
            "unthrottle",
            "power-on",
        ],
    )
    p.add_argument("arg", nargs="?")
    p.set_defaults(func=cmd_fault)
    p = sub.add_parser("cleanup")
    p.set_defaults(func=cmd_cleanup)
    a = ap.parse_args(argv)
    try:
        return a.func(a)
    except fl.FleetError as exc:
        print(f"fleet: error: {exc}", file=sys.stderr)
        return 1
