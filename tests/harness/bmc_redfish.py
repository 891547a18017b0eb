"""One test node's Redfish BMC: sushy-tools' emulator with a systems driver of ours whose
power actions stop and boot the node's nspawn machine.

Run by tests/harness/bmc.py as ``python -m tests.harness.bmc_redfish <bmc.json>``, one
process per node (a real server has a BMC of its own). sushy-tools (2.2.0) picks its
systems driver in ``main.Application.systems`` (fake, Nova, Ironic or libvirt) and has
no hook for another, so this launcher replaces that property with :class:`NspawnSystems`
and then runs the stock ``main()`` (HTTPS, basic auth from an htpasswd file with bcrypt
hashes), as FACTS.md found works.

The node is driven through the files its fleet supervisor watches (fleet_supervisor.py):
``power-off`` (``force``: every process killed at once; else a clean poweroff) and
``power-on``. The power state is read from the supervisor's ``status.json``: ``off`` and
``failed`` are Off, anything else (running, rebooting, booting, hung) is On, as a BMC
reports a powered machine whatever its OS does.

What a power-off cures: when the node's state dir holds ``nvml.after-power-off.json``,
it replaces ``nvml.json`` as the power goes, so a fault "survives a warm reboot but not a
cold power cycle" (a GPU off the bus that a reboot does not bring back).

sushy-tools serves no event log, so the Manager gets a standard LogService ``SEL``
(``/redfish/v1/Managers/<id>/LogServices/SEL/Entries``, entries inline as BMCs return
them) read from ``<node dir>/sel.json``, which tests fill (tests/harness/bmc.py).
Every power request the BMC accepts is appended to ``<node dir>/bmc-actions.log``.
With ``"ipmi": true`` in its spec the same process also serves IPMI (RMCP+) on UDP 623 of
the same address (tests/harness/bmc_ipmi.py), as a server's BMC speaks both.
"""

from __future__ import annotations

import json
import sys
import time
import uuid as uuidlib
from pathlib import Path

import flask
from sushy_tools import error
from sushy_tools.emulator import main as emulator
from sushy_tools.emulator.resources.systems.base import AbstractSystemsDriver

OFF_STATES = ("off", "failed")


class NspawnSystems(AbstractSystemsDriver):
    """One system: the nspawn node whose directory is ``node_dir``."""

    def __init__(self, name: str, system_uuid: str, node_dir: Path) -> None:
        self._name, self._uuid, self.dir = name, system_uuid, node_dir
        self._boot_device = "Hdd"

    @property
    def driver(self) -> str:
        return "<fleetmedic nspawn>"

    @property
    def systems(self) -> list[str]:
        return [self._uuid]

    def _check(self, identity: str) -> None:
        if identity not in (self._uuid, self._name):
            raise error.NotFound(f"system {identity} was not found")

    def uuid(self, identity: str) -> str:
        self._check(identity)
        return self._uuid

    def name(self, identity: str) -> str:
        self._check(identity)
        return self._name

    def _state(self) -> str:
        try:
            return json.loads((self.dir / "status.json").read_text()).get("state", "unknown")
        except (OSError, ValueError):
            return "unknown"

    def get_power_state(self, identity: str) -> str:
        self._check(identity)
        return "Off" if self._state() in OFF_STATES else "On"

    def set_power_state(self, identity: str, state: str) -> None:
        self._check(identity)
        on = self.get_power_state(identity) == "On"
        if state in ("On", "ForceOn"):
            if not on:
                (self.dir / "power-on").touch()
        elif state in ("ForceOff", "GracefulShutdown"):
            if on:
                self._cut(force=state == "ForceOff")
        elif state in ("ForceRestart", "GracefulRestart", "PowerCycle"):
            if on:
                self._cut(force=state != "GracefulRestart")
                self._wait_off()
            (self.dir / "power-on").touch()
        else:
            raise error.NotSupportedError(f"power state {state} is not supported")
        with open(self.dir / "bmc-actions.log", "a") as f:
            f.write(f"{time.time():.3f} {state} (was {'On' if on else 'Off'})\n")

    def _cut(self, force: bool) -> None:
        state = self.dir / "state"
        cured = state / "nvml.after-power-off.json"
        if cured.exists():
            cured.replace(state / "nvml.json")
        (self.dir / "power-off").write_text("force\n" if force else "clean\n")

    def _wait_off(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self._state() not in OFF_STATES and time.monotonic() < deadline:
            time.sleep(0.05)

    def get_boot_device(self, identity: str) -> str:
        self._check(identity)
        return self._boot_device

    def set_boot_device(self, identity: str, boot_source: str) -> None:
        self._check(identity)
        self._boot_device = boot_source


def _add_log_service(app: flask.Flask, node_dir: Path) -> None:
    """A standard LogService ``SEL`` on the Manager, entries from ``sel.json``."""

    def base(identity: str) -> str:
        return f"/redfish/v1/Managers/{identity}/LogServices"

    @app.after_request
    def _link_logs(response: flask.Response) -> flask.Response:
        parts = flask.request.path.strip("/").split("/")
        manager = flask.request.method == "GET" and len(parts) == 4 and parts[2] == "Managers"
        if manager and response.status_code == 200 and response.is_json:
            data = response.get_json()
            data["LogServices"] = {"@odata.id": base(parts[3])}
            response.set_data(json.dumps(data))
        return response

    @app.route("/redfish/v1/Managers/<identity>/LogServices")
    def _log_services(identity: str):
        return {
            "@odata.type": "#LogServiceCollection.LogServiceCollection",
            "@odata.id": base(identity),
            "Name": "Log Service Collection",
            "Members@odata.count": 1,
            "Members": [{"@odata.id": f"{base(identity)}/SEL"}],
        }

    @app.route("/redfish/v1/Managers/<identity>/LogServices/SEL")
    def _sel(identity: str):
        return {
            "@odata.type": "#LogService.v1_1_0.LogService",
            "@odata.id": f"{base(identity)}/SEL",
            "Id": "SEL",
            "Name": "System Event Log",
            "OverWritePolicy": "WrapsWhenFull",
            "Entries": {"@odata.id": f"{base(identity)}/SEL/Entries"},
        }

    @app.route("/redfish/v1/Managers/<identity>/LogServices/SEL/Entries")
    def _entries(identity: str):
        try:
            entries = json.loads((node_dir / "sel.json").read_text())
        except (OSError, ValueError):
            entries = []
        members = [
            {
                "@odata.type": "#LogEntry.v1_4_0.LogEntry",
                "@odata.id": f"{base(identity)}/SEL/Entries/{i}",
                "Id": str(i),
                "EntryType": "SEL",
                **e,
            }
            for i, e in enumerate(entries, 1)
        ]
        return {
            "@odata.type": "#LogEntryCollection.LogEntryCollection",
            "@odata.id": f"{base(identity)}/SEL/Entries",
            "Name": "System Event Log Entries",
            "Description": "System Event Log",
            "Members@odata.count": len(members),
            "Members": members,
        }


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    node_dir = Path(spec["node_dir"])
    systems = NspawnSystems(spec["name"], str(uuidlib.UUID(spec["machine_id"])), node_dir)
    emulator.Application.systems = property(lambda self: systems)  # type: ignore[assignment]
    _add_log_service(emulator.app, node_dir)
    if spec.get("ipmi"):
        from tests.harness import bmc_ipmi

        bmc_ipmi.serve(systems, spec["username"], spec["password"], spec["address"])
    sys.argv = [
        "sushy-emulator",
        "--config",
        spec["config"],
        "--interface",
        spec["address"],
        "--port",
        str(spec["port"]),
        "--ssl-certificate",
        spec["cert"],
        "--ssl-key",
        spec["key"],
    ]
    return emulator.main()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
