"""A dead fleet's subnet may be taken by a fleet started since: the same octet gives the
same netns, veth and bridge names. Sweeping the dead fleet's record must not tear down
the live fleet that now holds those names (seen once: a Slurm fleet lost its three
nodes' network mid-test, at the moment another run's fleet started and swept)."""

from __future__ import annotations

import json
import os

from tests.harness import fleet_net
from tests.harness.fleet_sys import FLEETS_ROOT, cleanup_stale, fleets_lock


def test_sweeping_a_dead_record_spares_the_live_fleet_on_its_subnet(fleet_factory):
    live = fleet_factory(1)
    node = live.node(1)
    before = node.boot_id()
    stale = FLEETS_ROOT / f"stale-{os.getpid()}"
    stale.mkdir()
    dead = {"pid": 2**22 + 1, "start": 0}  # no such process
    (stale / "fleet.json").write_text(
        json.dumps(
            {
                "name": stale.name,
                "dir": str(stale),
                "octet": live.octet,
                "state": "up",
                "creator": dead,
                "owner": dead,
                "supervisor": dead,
                "nodes": [
                    {
                        "name": "node-1",
                        "index": 1,
                        "address": node.address,
                        "netns": node.netns,
                        "veth": node.veth,
                        "machine_id": "0" * 32,
                    }
                ],
            }
        )
    )
    with fleets_lock():
        removed = cleanup_stale()
    assert f"fleet {stale.name}" in removed and not stale.exists()
    assert node.netns in fleet_net.list_netns()
    assert {node.veth, live.bridge} <= set(fleet_net.list_links())
    assert node.boot_id() == before, "the live node kept running"
