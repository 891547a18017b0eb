"""Ansible host variables and groups for a Node: one definition for the inventory plugin
(``plugins/inventory/k8s_nodes.py``) and the controller's per-run inventory, so a playbook
sees the same variables whether a human or the controller runs it.

Pure: input is a :class:`~fleetmedic.model.nodestate.NodeView`, output plain data.

Values read from the cluster are data, never templates. The inventory plugin marks them
unsafe (``wrap_var``). The controller's inventory goes to ansible-runner as JSON, which
cannot carry Ansible's unsafe marker, so :func:`controller_host_vars` keeps out what could
be read as a template: an annotation value with a Jinja delimiter is withheld, and an SSH
address that is not a plain host name or IP address is refused. (Labels, taints and node
names are safe: the API server only accepts ``[A-Za-z0-9._/-]`` there.)
"""

from __future__ import annotations

import re
from typing import Any

from fleetmedic.model import keys
from fleetmedic.model.nodestate import NodeView
from fleetmedic.model.vocabulary import REPAIR_STATES

STATE_GROUPS = {state: f"repair_{state}" for state in REPAIR_STATES}
ALL_GROUPS = (
    "in_repair",
    *STATE_GROUPS.values(),
    "slow_network",
    "maintenance",
    "foreign",
    "healthy",
)
WITHHELD = "(withheld: looks like a template)"
_TEMPLATE = re.compile(r"\{\{|\{%|\{#")
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.:_-]{0,252})?|\[[0-9A-Fa-f:.]+\]")


def node_tags(view: NodeView) -> list[str]:
    """The states a node counts as: its repair state, ``slow_network``, ``maintenance`` (a
    diagnostic sweep holds it), ``foreign`` (another tool's signal stands on it), or
    ``healthy`` when none of these: a node being swept is not free for an ad-hoc play."""
    tags = []
    if view.state != "healthy":
        tags.append(view.state)
    if view.slow_network:
        tags.append("slow_network")
    if view.maintenance:
        tags.append("maintenance")
    if view.foreign:
        tags.append("foreign")
    return tags or ["healthy"]


def foreign_group(tool: str) -> str:
    """``foreign_<tool>``, as an Ansible group name (letters, digits, underscores)."""
    return "foreign_" + re.sub(r"[^A-Za-z0-9_]", "_", tool)


def host_groups(view: NodeView) -> list[str]:
    """Groups for a node: one per state tag (``repair_<state>``), ``foreign_<tool>`` per other
    tool's signal on it, plus ``vendor_<vendor>``."""
    tools = sorted({foreign_group(s.tool) for s in view.foreign})  # children of `foreign`
    states = [STATE_GROUPS.get(tag, tag) for tag in node_tags(view) if tag != "foreign"]
    return states + tools + ["vendor_" + view.vendor]


def ansible_address(
    view: NodeView, address_label: str | None = None, address_annotation: str | None = None
) -> str | None:
    """SSH address: a label override, an annotation override, else the view's address
    (the ``fleetmedic.io/ssh-host`` annotation, else the InternalIP)."""
    if address_label and view.labels.get(address_label):
        return view.labels[address_label]
    if address_annotation and view.annotations.get(address_annotation):
        return view.annotations[address_annotation]
    return view.address


def host_vars(view: NodeView, address: str | None) -> dict[str, Any]:
    """Host variables for a node (plain data; the inventory plugin marks them unsafe)."""
    hostvars: dict[str, Any] = {
        "fleetmedic_state": view.state,
        "fleetmedic_slow_network": view.slow_network,
        "fleetmedic_maintenance": view.maintenance,
        "fleetmedic_vendor": view.vendor,
        "fleetmedic_unschedulable": view.unschedulable,
        "fleetmedic_foreign_signals": list(view.foreign_signals),
        "k8s_labels": dict(view.labels),
        "k8s_taints": [dict(t) for t in view.taints],
        "fleetmedic_annotations": {
            k: v for k, v in view.annotations.items() if k.startswith(keys.PREFIX)
        },
    }
    if address:
        hostvars["ansible_host"] = address
    return hostvars


def safe_address(address: str | None) -> str | None:
    """``address`` if it is a plain host name or IP address, else None (no SSH target)."""
    if address and _HOST.fullmatch(address):
        return address
    return None


def controller_host_vars(view: NodeView) -> tuple[str | None, dict[str, Any]]:
    """(SSH address, host variables) for the controller's own inventory of one node."""
    address = safe_address(view.address)
    hostvars = host_vars(view, address)
    hostvars["fleetmedic_annotations"] = {
        k: (WITHHELD if _TEMPLATE.search(v) else v)
        for k, v in hostvars["fleetmedic_annotations"].items()
    }
    return address, hostvars
