"""The BMCs of a running test fleet, from the command line: for a Molecule scenario, whose
steps are separate Ansible runs, so the emulators must outlive the command that starts
them.

    python -m tests.harness.bmc_cli up --fleet mol-power-cycle

starts a Redfish and IPMI BMC per node of the fleet (tests/harness/bmc.py) unless they
answer already, and prints one JSON object: ``{"bmcs": {node: address}, "username_file":
..., "password_file": ...}``. The credentials are random per fleet, kept in 0600 files in
the fleet's directory (so a second ``up`` gives the same ones). Nothing stops them but
the fleet's own teardown (``python -m tests.harness.fleet down``), which ends every
process whose command line names a file of the fleet, as each emulator's does.

A fleet that is not running: one line on stderr, exit 1.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys

from tests.harness.bmc import BmcSet, _answers, bmc_address
from tests.harness.fleet import FleetError, attach


def up(name: str) -> dict:
    fleet = attach(name)
    bmc_dir = fleet.dir / "bmc"
    creds = bmc_dir / "creds"
    creds.mkdir(parents=True, exist_ok=True, mode=0o700)
    user_file, password_file = creds / "bmc-username", creds / "bmc-password"
    if not (user_file.exists() and password_file.exists()):
        for path, value in (
            (user_file, f"fm-{secrets.token_hex(4)}"),  # IPMI: at most 16 bytes
            (password_file, f"fm-pw-{secrets.token_urlsafe(9)}"),  # IPMI: at most 20
        ):
            path.write_text(value + "\n")
            path.chmod(0o600)
    addresses = {n.name: bmc_address(fleet.octet, n.index) for n in fleet.nodes}
    if not all(_answers(a) for a in addresses.values()):
        username = user_file.read_text().strip()
        password = password_file.read_text().strip()
        BmcSet(fleet.dir, username, password).start(fleet, detached=True)
    return {
        "bmcs": addresses,
        "username_file": str(user_file),
        "password_file": str(password_file),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up", help="start the fleet's BMCs (if they do not answer yet)")
    u.add_argument("--fleet", required=True, help="the running fleet's name")
    args = ap.parse_args(argv)
    try:
        print(json.dumps(up(args.fleet)))
    except (FleetError, RuntimeError) as exc:
        print(f"bmc_cli: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
