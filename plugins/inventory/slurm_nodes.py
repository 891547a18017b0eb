# Copyright: fleetmedic developers
# Apache License 2.0 (see galaxy.yml)
"""Dynamic inventory of Slurm nodes grouped by who drained them and why."""

from __future__ import annotations

DOCUMENTATION = r"""
name: slurm_nodes
short_description: Slurm nodes grouped by fleetmedic repair state and drain owner
description:
  - Lists the nodes of a Slurm cluster (C(sinfo --json) with the cluster's C(SLURM_CONF)) and
    puts each one in groups by who drained it, read from its drain or down reason.
  - A node drained with fleetmedic's reason (our prefix, the rung and the finding, for example
    C(fleetmedic:) C(reboot:) C(xid 79)) is in C(repair_<rung>) (V(repair_diagnose),
    V(repair_reset), V(repair_reboot), V(repair_power_cycle), V(repair_reimage),
    V(repair_replace), V(repair_manual)), the same group names as the
    C(fleetmedic.fleet.k8s_nodes) plugin; V(in_repair) is their parent.
  - A node whose reason is another tool's is in V(foreign) and in its owner's group,
    V(foreign_nhc) (C(NHC:)), V(foreign_hyperpod) (C(Action:Reboot), C(Action:Replace)),
    V(foreign_soperator) (C([node_problem]), C([hardware_problem])), V(foreign_slinky)
    (C(slurm-operator:)), and V(foreign_other) for any other reason (a human's, Slurm's own
    C(Not responding)). The ownership rule is C(fleetmedic.model.slurmowner), the one the
    controller uses.
  - A node with no reason is in V(healthy).
  - Every node is also in C(slurm_<state>) for its Slurm state as C(sinfo) names it
    (V(slurm_idle), V(slurm_drained), V(slurm_draining), V(slurm_down), ...) and in
    C(partition_<name>) for each of its partitions.
  - Uses a YAML configuration file whose name ends in C(.slurm_nodes.yml) or C(.slurm_nodes.yaml).
  - A reason that starts with our prefix but names no rung (someone rewrote the rest) is still
    ours, and shown in V(repair_manual), since a human should look at it.
  - Host variables are C(ansible_host) (the node's NodeAddr), C(fleetmedic_state) (the rung, or
    V(healthy) or V(foreign)), C(fleetmedic_owner) (V(ours), V(none), V(foreign_nhc),
    V(foreign_hyperpod), V(foreign_soperator), V(foreign_slinky) or V(foreign)),
    C(slurm_state), C(slurm_flags), C(slurm_reason), C(slurm_reason_user), C(slurm_reason_time)
    (epoch seconds), C(slurm_partitions), C(slurm_boot_time) and C(fleetmedic_record) (the
    repair record fleetmedic keeps in the node's Extra field). Values read from the cluster are
    marked unsafe, so a reason can never be evaluated as a template.
requirements:
  - fleetmedic (the Python package, in the Python that runs Ansible)
  - the Slurm client tools (C(sinfo)) on the machine that runs Ansible
extends_documentation_fragment:
  - constructed
  - inventory_cache
notes:
  - Slurm 22.05's C(sinfo --json) ignores C(-n), so names and partitions are filtered here.
  - An unreachable slurmctld fails the inventory with a one-line error (C(sinfo --json) exits 0 with
    an empty list then; fleetmedic's adapter reads its error list), never an empty inventory.
options:
  plugin:
    description: Token that marks this file as a source for this plugin.
    required: true
    type: str
    choices: [fleetmedic.fleet.slurm_nodes, slurm_nodes]
  slurm_conf:
    description:
      - Path to the cluster's C(slurm.conf). May be a template. A relative path is relative to
        the directory of this inventory file.
      - When unset, C($SLURM_CONF) is used, as the Slurm tools do.
    type: str
    env:
      - name: FLEETMEDIC_SLURM_CONF
      - name: SLURM_CONF
  reason_prefix:
    description: The drain reason prefix fleetmedic owns. Must match the controller's config.
    type: str
    default: 'fleetmedic:'
  partitions:
    description: Only nodes in one of these partitions. Empty means every node.
    type: list
    elements: str
    default: []
  names:
    description: Only these node names. Empty means every node.
    type: list
    elements: str
    default: []
  states:
    description:
      - Include a node when its fleetmedic state is in this list. A node's state is its rung
        (V(diagnose), V(reset), V(reboot), V(power_cycle), V(reimage), V(replace) or V(manual))
        when fleetmedic drained it, V(foreign) when another's reason stands on it, V(healthy)
        when it has no reason.
      - Leave out V(healthy) for an inventory of only the fenced nodes.
    type: list
    elements: str
    choices: [healthy, diagnose, reset, reboot, power_cycle, reimage, replace, manual, foreign]
    default: [healthy, diagnose, reset, reboot, power_cycle, reimage, replace, manual, foreign]
  timeout:
    description: Seconds to wait for C(sinfo).
    type: float
    default: 30
"""

EXAMPLES = r"""
# inventory/fenced.slurm_nodes.yml: the nodes fleetmedic drained and the foreign drains
plugin: fleetmedic.fleet.slurm_nodes
slurm_conf: /etc/slurm/slurm.conf
states: [diagnose, reset, reboot, power_cycle, reimage, replace, manual, foreign]
---
# One partition, SSH as a site user, a group per rack from the node's Extra field.
plugin: fleetmedic.fleet.slurm_nodes
partitions: [h100]
compose:
  ansible_user: "'ops'"
groups:
  drained_by_nhc: fleetmedic_owner == 'foreign_nhc'
"""

import re

from ansible.errors import AnsibleError
from ansible.utils.unsafe_proxy import wrap_var
from ansible_collections.fleetmedic.fleet.plugins.module_utils.text import one_line
from ansible_collections.fleetmedic.fleet.plugins.plugin_utils.node_inventory import NodeInventory

try:
    from fleetmedic.adapters.slurm import SlurmNode
    from fleetmedic.errors import FleetmedicError
    from fleetmedic.model.slurmreason import parse_reason
    from fleetmedic.model.vocabulary import REPAIR_STATES
    from fleetmedic.model.slurmowner import Owner, owner
except ImportError as _exc:  # reported by parse(), so ansible-doc still works without it
    FLEETMEDIC_IMPORT_ERROR = _exc
else:
    FLEETMEDIC_IMPORT_ERROR = None

_GROUP_CHARS = re.compile(r"[^A-Za-z0-9_]")


def group_name(prefix, value):
    """A valid Ansible group name for a Slurm state or partition (``partition_gpu-a`` ->
    ``partition_gpu_a``)."""
    return prefix + _GROUP_CHARS.sub("_", str(value).lower())


def slurm_state(node):
    """The state as sinfo names it: drained/draining for a drain, else the base state."""
    if node.drain:
        return "drained" if node.drained else "draining"
    return node.state or "unknown"


class InventoryModule(NodeInventory):
    NAME = "fleetmedic.fleet.slurm_nodes"
    SUFFIX = "slurm_nodes"

    def parse(self, inventory, loader, path, cache=True):
        self._start(inventory, loader, path, cache, FLEETMEDIC_IMPORT_ERROR)
        conf = self._path_option("slurm_conf", path)
        self._populate(self._nodes(path, cache, lambda: self._list_nodes(conf)))
        if conf:
            self.inventory.set_variable("all", "fleetmedic_slurm_conf", conf)

    # -- the data source (the only seam unit tests replace) ------------------
    def _list_nodes(self, conf):
        """Nodes as sinfo --json dicts of the fields used, from fleetmedic's Slurm adapter."""
        from fleetmedic.adapters.slurm import Slurm

        try:
            slurm = Slurm(
                conf, prefix=self.get_option("reason_prefix"), timeout=self.get_option("timeout")
            )
            nodes = slurm.nodes(self.get_option("partitions") or None)
        except (FleetmedicError, ValueError) as exc:
            raise AnsibleError("slurm_nodes: cannot list nodes: %s" % one_line(exc))
        return [
            {
                "name": n.name,
                "state": n.state,
                "state_flags": sorted(n.flags),
                "reason": n.reason,
                "reason_set_by_user": n.reason_user,
                "reason_changed_at": n.reason_time,
                "partitions": list(n.partitions),
                "extra": n.extra,
                "boot_time": n.boot_time,
                "address": n.address,
            }
            for n in nodes
        ]

    # -- building the inventory ----------------------------------------------
    def _classify(self, reason):
        prefix = self.get_option("reason_prefix")
        who = owner(reason, prefix)
        if who is Owner.OURS:
            ours = parse_reason(reason, prefix)
            # ours by prefix but not our format (someone rewrote the rest): still ours to
            # show, under the strongest rung, since a human must look at it
            return (ours.rung if ours else "manual"), who
        if who.foreign:
            return "foreign", who
        return "healthy", who

    def _populate(self, nodes):
        self.inventory.add_group("in_repair")
        self.inventory.add_group("foreign")
        self.inventory.add_group("healthy")
        for rung in REPAIR_STATES:
            self.inventory.add_group("repair_" + rung)
            self.inventory.add_child("in_repair", "repair_" + rung)
        foreign_groups = {
            o: "foreign_other" if o is Owner.FOREIGN else o.value for o in Owner if o.foreign
        }
        for group in foreign_groups.values():  # the known owners, then foreign_other
            self.inventory.add_group(group)
            self.inventory.add_child("foreign", group)
        names = self.get_option("names") or []
        states = self.get_option("states") or []
        strict = self.get_option("strict")
        for raw in sorted(nodes, key=lambda n: n["name"]):
            node = SlurmNode.from_json(raw)
            if names and node.name not in names:
                continue
            state, who = self._classify(node.reason)
            if state not in states:
                continue
            hostvars = wrap_var(
                {
                    "ansible_host": node.address or node.name,
                    "fleetmedic_state": state,
                    "fleetmedic_owner": who.value,
                    "slurm_state": slurm_state(node),
                    "slurm_flags": sorted(node.flags),
                    "slurm_reason": node.reason,
                    "slurm_reason_user": node.reason_user,
                    "slurm_reason_time": node.reason_time,
                    "slurm_partitions": list(node.partitions),
                    "slurm_boot_time": node.boot_time,
                    "fleetmedic_record": node.record,
                }
            )
            name = node.name
            self.inventory.add_host(name)
            groups = [group_name("slurm_", slurm_state(node))]
            groups += [group_name("partition_", p) for p in node.partitions]
            if state == "healthy":
                groups.append("healthy")
            elif state == "foreign":
                groups.append(foreign_groups[who])
            else:
                groups.append("repair_" + state)
            for group in groups:
                self.inventory.add_group(group)
                self.inventory.add_child(group, name)
            for key, value in hostvars.items():
                self.inventory.set_variable(name, key, value)
            self._set_composite_vars(self.get_option("compose"), hostvars, name, strict=strict)
            self._add_host_to_composed_groups(
                self.get_option("groups"), hostvars, name, strict=strict
            )
            self._add_host_to_keyed_groups(
                self.get_option("keyed_groups"), hostvars, name, strict=strict
            )
