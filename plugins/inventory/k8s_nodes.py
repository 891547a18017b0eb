# Copyright: fleetmedic developers
# Apache License 2.0 (see galaxy.yml)
"""Dynamic inventory of Kubernetes Nodes grouped by fleetmedic repair state."""

from __future__ import annotations

DOCUMENTATION = r"""
name: k8s_nodes
short_description: Kubernetes Nodes grouped by fleetmedic repair state
description:
  - Lists the Nodes of a Kubernetes cluster (optionally by label selector) and puts each one in
    groups by its fleetmedic state, read from its taints on the client side
    (V(repair_diagnose), V(repair_reset), V(repair_reboot), V(repair_power_cycle),
    V(repair_reimage), V(repair_replace), V(repair_manual),
    V(slow_network), V(maintenance), V(healthy)),
    and by GPU vendor (V(vendor_nvidia), V(vendor_amd), V(vendor_unknown)).
    V(in_repair) is the parent of the C(repair_*) groups.
  - A node carrying another tool's signal (see O(foreign_signals)) is in V(foreign) and in
    C(foreign_<tool>) (for example V(foreign_konduktor)), whatever its state, so "which nodes are
    tainted?" has a complete answer; V(foreign) is the parent of the C(foreign_*) groups.
  - A node held by an open domain incident (the controller's C(domains) config; a rack or an
    NVLink domain that fenced together) is in C(incident_<key>_<value>), the label key and value
    with every character outside C([A-Za-z0-9_]) as C(_) (for example
    V(incident_nvidia_com_gpu_clique_c_17)), so an ad-hoc playbook can target the whole domain;
    V(incident) is the parent of the C(incident_*) groups.
  - A node's state is computed by C(fleetmedic.model.nodestate.view), the same function the
    controller and C(fleetmedic status) use, so the three can never disagree.
  - V(healthy) holds nodes with no fleetmedic taint at all. A node with only the slow-network
    taint is in V(slow_network) but not in V(healthy). A node that a diagnostic sweep holds
    (fleetmedic's maintenance taint) is in V(maintenance), not in V(healthy).
  - Uses a YAML configuration file whose name ends in C(.k8s_nodes.yml) or C(.k8s_nodes.yaml).
  - Host variables are C(ansible_host) (the node's InternalIP, or the override below),
    C(fleetmedic_state) (V(healthy), or the repair state V(reset), V(reboot), V(power_cycle), V(reimage),
    V(replace) or V(manual)), C(fleetmedic_slow_network), C(fleetmedic_maintenance),
    C(fleetmedic_vendor) (V(nvidia), V(amd) or V(unknown)), C(fleetmedic_unschedulable),
    C(fleetmedic_foreign_signals), C(k8s_labels), C(k8s_taints) and C(fleetmedic_annotations)
    (only the C(fleetmedic.io/) annotations, raw strings). Values read from the cluster are
    marked unsafe, so a label can never be evaluated as a template.
requirements:
  - fleetmedic (the Python package, in the Python that runs Ansible)
extends_documentation_fragment:
  - constructed
  - inventory_cache
notes:
  - Node field selectors cannot select by taint, so taints are filtered here, after the list call.
  - The API call has a fixed timeout (see C(fleetmedic.adapters.kube)); an unreachable API server
    or a bad kubeconfig fails the inventory with a one-line error.
options:
  plugin:
    description: Token that marks this file as a source for this plugin.
    required: true
    type: str
    choices: [fleetmedic.fleet.k8s_nodes, k8s_nodes]
  kubeconfig:
    description:
      - Path to the kubeconfig file. May be a template. A relative path is relative to the
        directory of this inventory file.
      - When unset, C($KUBECONFIG) and then C(~/.kube/config) are used, as kubectl does.
    type: str
    env:
      - name: FLEETMEDIC_KUBECONFIG
      - name: K8S_AUTH_KUBECONFIG
  context:
    description: Context in the kubeconfig to use. Default is the kubeconfig's current context.
    type: str
    env:
      - name: K8S_AUTH_CONTEXT
  label_selector:
    description:
      - Kubernetes label selector sent with the list call, for example
        C(node-role.kubernetes.io/gpu=true,fleetmedic.io/gpu-vendor in (nvidia,amd)).
      - Empty selects every node.
    type: str
    default: ''
  names:
    description:
      - Only these node names (after the list call). Empty means every node the selector returns.
      - The controller uses this to build an inventory of exactly the nodes it acts on.
    type: list
    elements: str
    default: []
  states:
    description:
      - Include a node when one of its states is in this list. A node's states are its repair
        state (V(diagnose), V(reset), V(reboot), V(power_cycle), V(reimage), V(replace) or
        V(manual)) when it has one,
        V(foreign) when another tool's signal stands on it, V(slow_network) or V(maintenance)
        when it carries that taint, and V(healthy) when it has none of these.
      - Leave out V(healthy) for an inventory of only the broken nodes.
    type: list
    elements: str
    choices: [healthy, diagnose, reset, reboot, power_cycle, reimage, replace, manual, slow_network,
              maintenance, foreign]
    default: [healthy, diagnose, reset, reboot, power_cycle, reimage, replace, manual, slow_network,
              maintenance, foreign]
  vendors:
    description: Only nodes of these GPU vendors (from the C(fleetmedic.io/gpu-vendor) label). Empty means all.
    type: list
    elements: str
    choices: [nvidia, amd, unknown]
    default: []
    aliases: [vendor]
  taint_preset:
    description:
      - Name of the taint vocabulary preset that says which taints mean which state.
      - V(default) uses C(fleetmedic.io/repair=reset|reboot|power-cycle|reimage|replace|manual) and
        C(fleetmedic.io/slow-network=true); V(ossci) uses C(repair-reset), C(repair-reboot),
        C(repair-power-cycle), C(repair-reimage), C(repair-replace), C(repair-manual) and C(slow-network), each C(=true).
    type: str
    default: default
  taint_names:
    description:
      - Custom taint names, each overriding one entry of O(taint_preset). Must match the
        controller's config.
      - Keys V(reset), V(reboot), V(power_cycle), V(reimage), V(replace), V(manual), V(slow_network)
        and V(maintenance), each a dict with C(key) and C(value).
    type: dict
  foreign_signals:
    description:
      - Signals from other tools to report in C(fleetmedic_foreign_signals) and the C(foreign_<tool>)
        groups (they do not change the state; the controller decides what they mean). Each is a
        dict with C(kind) (V(taint) or V(condition)), C(key), and optionally C(value) and C(tool)
        (the group's name; default the key).
      - 'For example C({kind: taint, key: trainy.konduktor.ai/faulty}) or
        C({kind: condition, key: GPUProblem, value: "True"}).'
    type: list
    elements: dict
    default: []
  address_label:
    description:
      - Name of a node label whose value, when present, is used as C(ansible_host).
      - Takes precedence over O(address_annotation) and the InternalIP.
    type: str
  address_annotation:
    description:
      - Name of a node annotation whose value, when present, is used as C(ansible_host).
      - The C(fleetmedic.io/ssh-host) annotation is always honoured before the InternalIP, since
        the controller reads it too.
    type: str
    default: fleetmedic.io/ssh-host
"""

EXAMPLES = r"""
# inventory/tainted.k8s_nodes.yml: only nodes fleetmedic has fenced, from $KUBECONFIG
plugin: fleetmedic.fleet.k8s_nodes
states: [diagnose, reset, reboot, power_cycle, reimage, replace, manual, slow_network, maintenance, foreign]
---
# Every GPU node of one pool, with an explicit kubeconfig and context, the OSSCI taint names,
# and the SSH address from a label set by the provisioning system.
plugin: fleetmedic.fleet.k8s_nodes
kubeconfig: /etc/fleetmedic/kubeconfig
context: prod-east
label_selector: pool=h100
taint_preset: ossci
address_label: example.com/bmc-ssh-address
---
# Only AMD nodes waiting for a reinstall, plus constructed groups and variables.
plugin: fleetmedic.fleet.k8s_nodes
states: [reimage]
vendors: [amd]
strict: false
compose:
  ansible_user: "'ops'"
  gpu_count: k8s_labels['fleetmedic.io/expected-gpus'] | default(0) | int
keyed_groups:
  - prefix: zone
    key: k8s_labels['topology.kubernetes.io/zone'] | default('none')
groups:
  cordoned: fleetmedic_unschedulable
---
# Cache the node list for five minutes (refresh with --flush-cache).
plugin: fleetmedic.fleet.k8s_nodes
cache: true
cache_plugin: ansible.builtin.jsonfile
cache_connection: ~/.cache/fleetmedic-inventory
cache_timeout: 300
"""

from ansible.errors import AnsibleError
from ansible.utils.unsafe_proxy import wrap_var
from ansible_collections.fleetmedic.fleet.plugins.module_utils.text import one_line
from ansible_collections.fleetmedic.fleet.plugins.plugin_utils.node_inventory import NodeInventory

try:
    from fleetmedic.errors import FleetmedicError
    from fleetmedic.model import nodestate, vocabulary

    # Groups and host variables are computed in one place for this plugin and the
    # controller's own inventory, so a playbook sees the same hosts either way.
    from fleetmedic.model.hostvars import (
        ALL_GROUPS,
        STATE_GROUPS,
        ansible_address,
        host_groups,
        host_vars,
        node_tags,
    )
except ImportError as _exc:  # reported by parse(), so ansible-doc still works without it
    FLEETMEDIC_IMPORT_ERROR = _exc
else:
    FLEETMEDIC_IMPORT_ERROR = None


class InventoryModule(NodeInventory):
    NAME = "fleetmedic.fleet.k8s_nodes"
    SUFFIX = "k8s_nodes"

    def parse(self, inventory, loader, path, cache=True):
        self._start(inventory, loader, path, cache, FLEETMEDIC_IMPORT_ERROR)
        vocab = self._vocabulary()
        foreign = self._foreign_signals()
        kubeconfig = self._path_option("kubeconfig", path)
        context = self._templated("context")
        selector = self._templated("label_selector")
        nodes = self._nodes(path, cache, lambda: self._list_nodes(kubeconfig, context, selector))
        self._populate(nodes, vocab, foreign)
        # where these nodes came from, so the playbooks take their node Leases on that cluster
        if kubeconfig:
            self.inventory.set_variable("all", "fleetmedic_kubeconfig", kubeconfig)
        if context:
            self.inventory.set_variable("all", "fleetmedic_kube_context", context)

    # -- options -------------------------------------------------------------
    def _vocabulary(self):
        custom = self.get_option("taint_names")
        try:
            return vocabulary.preset(self.get_option("taint_preset")).with_overrides(custom or {})
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise AnsibleError("k8s_nodes: bad taint names: %s" % one_line(exc))

    def _foreign_signals(self):
        signals = []
        for entry in self.get_option("foreign_signals") or []:
            if (
                not isinstance(entry, dict)
                or entry.get("kind") not in ("taint", "condition")
                or not entry.get("key")
            ):
                raise AnsibleError(
                    "k8s_nodes: each foreign_signals entry needs kind (taint or condition) "
                    "and key, got %r" % (entry,)
                )
            value = entry.get("value")
            signals.append(
                nodestate.ForeignSignal(
                    entry["kind"],
                    str(entry["key"]),
                    None if value is None else str(value),
                    tool=str(entry.get("tool") or ""),
                )
            )
        return signals

    # -- the data source (the only seam unit tests replace) ------------------
    def _list_nodes(self, kubeconfig, context, label_selector):
        """Nodes as plain JSON dicts, from fleetmedic's Kubernetes adapter."""
        try:
            from fleetmedic.adapters import kube
        except ImportError as exc:
            raise AnsibleError(
                "k8s_nodes: cannot load fleetmedic's Kubernetes adapter: %s" % one_line(exc)
            )
        try:
            api = kube.connect(kubeconfig, context)
        except (
            FleetmedicError
        ) as exc:  # ConfigError: missing or malformed kubeconfig, unknown context
            raise AnsibleError("k8s_nodes: %s" % one_line(exc))
        except Exception as exc:  # anything the adapter did not map; still one line
            raise AnsibleError(
                "k8s_nodes: kubeconfig %s: %s: %s" % (kubeconfig, type(exc).__name__, one_line(exc))
            )
        try:
            nodes, _resource_version = api.list_nodes(label_selector)
        except FleetmedicError as exc:  # unreachable, 401/403, 5xx: the adapter's one-line message
            raise AnsibleError("k8s_nodes: cannot list nodes: %s" % one_line(exc))
        except Exception as exc:
            raise AnsibleError(
                "k8s_nodes: cannot list nodes: %s: %s" % (type(exc).__name__, one_line(exc))
            )
        return nodes

    # -- building the inventory ----------------------------------------------
    def _wanted(self, view):
        names = self.get_option("names") or []
        vendors = self.get_option("vendors") or []
        states = self.get_option("states") or []
        return (
            (not names or view.name in names)
            and (not vendors or view.vendor in vendors)
            and any(tag in states for tag in node_tags(view))
        )

    def _populate(self, nodes, vocab, foreign):
        # Imported here, not with the rest: Ansible loads every enabled inventory plugin on
        # every run (a run with -i hosts.json too), and domainnode brings the config models,
        # 0.45 s of CPU that a run which never parses a k8s_nodes source need not pay.
        from fleetmedic.policy import domainnode

        for group in ALL_GROUPS:
            self.inventory.add_group(group)
        self.inventory.add_group("incident")
        for group in STATE_GROUPS.values():
            self.inventory.add_child("in_repair", group)
        strict = self.get_option("strict")
        for node in sorted(nodes, key=lambda n: (n.get("metadata") or {}).get("name") or ""):
            if not (node.get("metadata") or {}).get("name"):
                continue
            view = nodestate.view(node, vocab, foreign)
            if not self._wanted(view):
                continue
            address = ansible_address(
                view, self.get_option("address_label"), self.get_option("address_annotation")
            )
            if not address:
                self.display.warning(
                    "k8s_nodes: node %s has no InternalIP and no address override; "
                    "connecting by its name" % view.name
                )
            hostvars = wrap_var(host_vars(view, address))
            name = view.name
            self.inventory.add_host(name)
            for group in host_groups(view):
                self.inventory.add_group(group)
                if group.startswith("foreign_"):
                    self.inventory.add_child("foreign", group)
                self.inventory.add_child(group, name)
            for entry in domainnode.open_on_node(view.annotations.get(domainnode.ANN_INCIDENTS)):
                group = domainnode.inventory_group(entry["key"], entry["value"])
                self.inventory.add_group(group)
                self.inventory.add_child("incident", group)
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
