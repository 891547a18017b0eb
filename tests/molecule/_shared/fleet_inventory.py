#!/usr/bin/env python3
"""Ansible inventory script: the nodes of this Molecule scenario's test fleet.

Molecule links it as ``hosts`` into its inventory directory. The fleet is named
``mol-<scenario>`` (see create.yml) and its inventory (addresses, the fleet's SSH key,
its known_hosts, ServerAlive options) is read from the fleet directory, so host key
checking stays on. Before the fleet is up it lists no hosts.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import yaml

FLEETS_ROOT = Path(os.environ.get("FLEETMEDIC_FLEETS", "/run/fleetmedic/fleets"))


def fleet_name() -> str:
    scenario = os.environ.get("MOLECULE_SCENARIO_NAME", "default")
    return ("mol-" + scenario.replace("_", "-"))[:24]


def main() -> int:
    if "--host" in sys.argv:
        print("{}")
        return 0
    path = FLEETS_ROOT / fleet_name() / "inventory.yml"
    out: dict = {"_meta": {"hostvars": {}}, "all": {"hosts": [], "vars": {}}}
    if path.exists():
        data = (yaml.safe_load(path.read_text()) or {}).get("all", {})
        out["all"]["vars"] = data.get("vars") or {}
        for name, hostvars in (data.get("hosts") or {}).items():
            out["all"]["hosts"].append(name)
            out["_meta"]["hostvars"][name] = hostvars or {}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
