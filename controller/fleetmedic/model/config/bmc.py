"""The ``bmc:`` section: how the ``power_cycle`` rung reaches each node's BMC.

    bmc:
      protocol: redfish                      # or ipmi (ipmitool on this host)
      address_from: label                    # label | annotation | inventory
      address_key: fleetmedic.io/bmc-address # the label or annotation that holds it
      # addresses_file: /etc/fleetmedic/bmc-addresses.yaml   # inventory: {node-17: 10.1.7.17}
      username_credential: bmc-username      # $CREDENTIALS_DIRECTORY/bmc-username
      password_credential: bmc-password      # or username_file / password_file
      timeout: 20s                           # one BMC request
      off_time: 10s                          # the node stays off this long

The address is a host name or IP address, with ``:port`` where the BMC listens on
another port; it comes from one place, as the operator chooses: a node label, a node
annotation, or an inventory keyed by node name (`addresses` inline, or `addresses_file`,
a YAML mapping re-read at each power cycle, so a node added to it needs no restart).

The credentials are files (a systemd credential, or a path), never values in this file:
the controller hands the power_cycle playbook the files' paths, and the playbook reads
them on this host in tasks that log nothing, so neither appears in a log, an Event, an
annotation, the evidence or an email. (A username may be given inline: it is not a
secret on most BMCs, but it is kept out of every output all the same.)
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from fleetmedic.model.config.types import ConfigPath, Duration, Port, Section, credential_path

ADDRESS = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}))*"
    r"|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?"
)
"""A host name, IPv4 address or bracketed IPv6 address, with an optional port: nothing
Ansible could read as a template, nothing a URL could smuggle a path or user into."""


def valid_address(address: str) -> bool:
    return bool(ADDRESS.fullmatch(address))


class BmcConfig(Section):
    protocol: Literal["redfish", "ipmi"] = "redfish"
    """redfish: community.general's redfish_command over HTTPS (every current server BMC);
    ipmi: ipmitool's lanplus (RMCP+) for older ones."""
    address_from: Literal["label", "annotation", "inventory"] = "label"
    """Where a node's BMC address is read. A label by default: provisioning tools label
    nodes, and a label is visible to `kubectl get -L`."""
    address_key: str = "fleetmedic.io/bmc-address"
    """The label or annotation holding the address (label values cannot hold `:port`;
    use an annotation or the inventory for a BMC on a non-standard port)."""
    addresses: dict[str, str] = Field(default_factory=dict)
    """address_from: inventory: node name -> address, inline (small fleets, tests)."""
    addresses_file: ConfigPath | None = None
    """address_from: inventory: a YAML mapping node name -> address (e.g. exported from the
    site's DCIM), re-read at each power cycle; it wins over `addresses` for a node in both."""
    username: str | None = None
    """The BMC user, inline (not a secret on most BMCs; still never logged)."""
    username_file: ConfigPath | None = None
    """File whose first line is the BMC user."""
    username_credential: str | None = None
    """systemd credential holding the BMC user; wins over the file."""
    password_file: ConfigPath | None = None
    """File whose first line is the BMC password (mode 0600, owned by the controller)."""
    password_credential: str | None = None
    """systemd credential holding the BMC password; wins over the file."""
    timeout: Duration = Field(20, le=300)
    """One BMC request: an unplugged or hung BMC fails the rung in bounded time (a BMC
    answers in well under a second; 20 s rides out a busy one)."""
    off_time: Duration = Field(10, le=600)
    """How long the node stays off: long enough for a GPU's power rails to drain."""
    redfish_mode: Literal["off_on", "cycle"] = "off_on"
    """off_on: ForceOff, wait until the BMC says Off, `off_time`, PowerOn (works on every
    BMC); cycle: the PowerCycle reset type, where the BMC offers it."""
    ipmi_port: Port = 623
    """IPMI's RMCP+ UDP port."""
    sel_hours: int = Field(24, ge=1, le=24 * 30)
    """The BMC event log entries of the last this many hours go into the node's evidence
    and the escalation email: the day before the fault, not the machine's whole life."""

    @model_validator(mode="after")
    def _sources(self) -> BmcConfig:
        users = [
            f for f in ("username", "username_file", "username_credential") if getattr(self, f)
        ]
        if len(users) != 1:
            raise ValueError(
                "give exactly one of username, username_file, username_credential"
                + (f" (got {', '.join(users)})" if users else "")
            )
        if not (self.password_file or self.password_credential):
            raise ValueError(
                "give password_file or password_credential (the password is never inline)"
            )
        if self.password_file and self.password_credential:
            raise ValueError("give one of password_file, password_credential, not both")
        inventory = self.address_from == "inventory"
        if inventory and not (self.addresses or self.addresses_file):
            raise ValueError("address_from: inventory needs `addresses` or `addresses_file`")
        if not inventory and (self.addresses or self.addresses_file):
            raise ValueError(
                f"`addresses`/`addresses_file` are read only with address_from: inventory "
                f"(address_from is {self.address_from})"
            )
        bad = next((a for a in self.addresses.values() if not valid_address(a)), None)
        if bad is not None:
            raise ValueError(f"addresses: {bad!r} is not a host or host:port")
        return self

    def username_path(self, environ: Mapping[str, str] = os.environ) -> Path | None:
        if self.username_credential:
            return credential_path(self.username_credential, environ)
        return self.username_file

    def password_path(self, environ: Mapping[str, str] = os.environ) -> Path:
        if self.password_credential:
            return credential_path(self.password_credential, environ)
        assert self.password_file is not None  # the validator saw to it
        return self.password_file

    def address_for(
        self,
        node: str,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        inventory: Mapping[str, Any] | None = None,
    ) -> tuple[str | None, str]:
        """(address, where it was looked for); the address is None when missing or not
        a plain host[:port]. ``inventory``: the addresses file's mapping, if read."""
        if self.address_from == "label":
            where, value = f"label {self.address_key}", labels.get(self.address_key)
        elif self.address_from == "annotation":
            where, value = f"annotation {self.address_key}", annotations.get(self.address_key)
        else:
            where = "the bmc inventory"
            value = (inventory or {}).get(node) or self.addresses.get(node)
        if not value:
            return None, f"no BMC address for {node} (looked in {where})"
        if not isinstance(value, str) or not valid_address(value):
            return None, f"BMC address of {node} in {where} is not a host or host:port"
        return value, where

    def playbook_vars(self, environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
        """What the power_cycle playbook gets besides the address: file paths, no secret."""
        out: dict[str, Any] = {
            "fleetmedic_bmc_protocol": self.protocol,
            "fleetmedic_bmc_password_path": str(self.password_path(environ)),
            "power_cycle_bmc_timeout": max(1, round(self.timeout)),
            "power_cycle_off_seconds": max(1, round(self.off_time)),
            "power_cycle_redfish_mode": self.redfish_mode,
            "power_cycle_ipmi_port": self.ipmi_port,
            "power_cycle_sel_hours": self.sel_hours,
        }
        user = self.username_path(environ)
        if user is not None:
            out["fleetmedic_bmc_username_path"] = str(user)
        else:
            out["fleetmedic_bmc_username"] = self.username
        return out
