"""The IPMI side of a test node's BMC: pyghmi's BMC server (RMCP+, IPMI 2.0 lanplus, the
protocol ``ipmitool -I lanplus`` and older server BMCs speak), on UDP 623 of the same
loopback address as the node's Redfish service, in the same process
(tests/harness/bmc_redfish.py starts it on a thread), driving the same nspawn machine
through the same :class:`~tests.harness.bmc_redfish.NspawnSystems`: ``chassis power
off`` is a forced power-off, ``soft`` a clean one, ``on`` boots the node, ``cycle`` and
``reset`` do both.

Known gap: pyghmi's server answers no storage commands, so ``ipmitool sel elist`` fails
on it and the power_cycle role records the event log as unavailable (a finding, never
an empty log); the SEL path is tested through Redfish.
"""

from __future__ import annotations

import threading

from pyghmi.ipmi.bmc import Bmc


class NspawnIpmiBmc(Bmc):
    """Chassis power commands mapped onto one nspawn node (``systems``: NspawnSystems)."""

    def __init__(self, systems, user: str, password: str, address: str, port: int = 623):
        super().__init__({user: password}, port=port, address=address)
        self.systems = systems
        self.identity = systems.systems[0]

    def _set(self, state: str) -> int:
        self.systems.set_power_state(self.identity, state)
        return 0

    def get_power_state(self) -> str:
        return "on" if self.systems.get_power_state(self.identity) == "On" else "off"

    def power_off(self) -> int:
        return self._set("ForceOff")

    def power_shutdown(self) -> int:
        return self._set("GracefulShutdown")

    def power_on(self) -> int:
        return self._set("On")

    def power_cycle(self) -> int:
        return self._set("PowerCycle")

    def power_reset(self) -> int:
        return self._set("ForceRestart")

    def is_active(self) -> bool:
        return self.get_power_state() == "on"

    def get_boot_device(self) -> str:
        return "default"


def serve(systems, user: str, password: str, address: str, port: int = 623) -> threading.Thread:
    """Start the IPMI BMC on a daemon thread (pyghmi's own receive loop)."""
    bmc = NspawnIpmiBmc(systems, user, password, address, port)
    thread = threading.Thread(target=bmc.listen, name="ipmi-bmc", daemon=True)
    thread.start()
    return thread
