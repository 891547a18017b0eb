#!/usr/bin/python
# Copyright: fleetmedic developers
# Apache License 2.0 (see galaxy.yml)
"""Take or give up the per-node Lease the fleetmedic controller holds while it works on a node."""

from __future__ import annotations

DOCUMENTATION = r"""
module: node_lease
short_description: Hold a node's fleetmedic Lease so the controller leaves the node alone
description:
  - The fleetmedic controller holds a C(coordination.k8s.io) Lease named C(fleetmedic-node-<node>)
    while it runs a playbook, a drain or a probe on a node, and waits while anyone else holds it.
    This module takes that Lease for an ad-hoc C(ansible-playbook) run (V(held)) and gives it up
    afterwards (V(released)), so a person and the controller never repair the same node at once.
  - Taking fails at once, with the holder's name, when the controller (or another run) holds it.
  - The Lease is not renewed while the play runs, so O(duration) must cover the whole play; if the
    play dies, the Lease simply expires.
  - Runs where Ansible runs (C(delegate_to) V(localhost)) and needs the fleetmedic Python package
    there, as the C(fleetmedic.fleet.k8s_nodes) inventory does.
version_added: 0.2.0
requirements:
  - fleetmedic (the Python package, in the Python that runs Ansible on the machine the task is delegated to)
author: fleetmedic developers (!UNKNOWN)
options:
  node:
    description: The Kubernetes Node name.
    type: str
    required: true
  state:
    description: V(held) takes (or renews) the Lease; V(released) gives it up if this O(holder) holds it.
    type: str
    choices: [held, released]
    default: held
  holder:
    description: Who holds it, as the controller's log and C(kubectl get lease) show it.
    type: str
    required: true
  namespace:
    description: Namespace of the Leases (the controller's C(leader_election.namespace)).
    type: str
    default: fleetmedic
  duration:
    description: Seconds the Lease is held without renewal.
    type: int
    default: 1800
  kubeconfig:
    description: kubeconfig file; default C(KUBECONFIG) or C(~/.kube/config).
    type: path
  context:
    description: Context in the kubeconfig; default its current context.
    type: str
attributes:
  check_mode:
    support: full
    description: In check mode the Lease is only read; the result says whether it could be taken.
  diff_mode:
    support: none
    description: Nothing to compare; the result says what happened.
"""

EXAMPLES = r"""
- name: Take the node's Lease for this play
  fleetmedic.fleet.node_lease:
    node: "{{ inventory_hostname }}"
    holder: "ansible-playbook alice@bastion-1"
  delegate_to: localhost

- name: Give it back
  fleetmedic.fleet.node_lease:
    node: "{{ inventory_hostname }}"
    holder: "ansible-playbook alice@bastion-1"
    state: released
  delegate_to: localhost
"""

RETURN = r"""
lease:
  description: Namespace and name of the Lease.
  returned: always
  type: str
  sample: fleetmedic/fleetmedic-node-gpu-17
holder:
  description: Who holds the Lease after this task (null when free).
  returned: always
  type: str
  sample: ansible-playbook alice@bastion-1
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fleetmedic.fleet.plugins.module_utils.text import one_line

try:
    from fleetmedic.adapters.kube import connect
    from fleetmedic.adapters.lease import Lease, node_lease_name
    from fleetmedic.errors import FleetmedicError
except ImportError as _exc:  # reported by main(), so ansible-doc works without it
    IMPORT_ERROR = _exc
else:
    IMPORT_ERROR = None

NO_LOCK_HINT = (
    "or run with -e fleetmedic_node_lease=false if no fleetmedic controller manages this node"
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            node=dict(type="str", required=True),
            state=dict(type="str", choices=["held", "released"], default="held"),
            holder=dict(type="str", required=True),
            namespace=dict(type="str", default="fleetmedic"),
            duration=dict(type="int", default=1800),
            kubeconfig=dict(type="path"),
            context=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    if IMPORT_ERROR is not None:
        module.fail_json(
            msg="node_lease needs the fleetmedic Python package where Ansible runs: %s (%s)"
            % (one_line(IMPORT_ERROR), NO_LOCK_HINT)
        )
    p = module.params
    if p["duration"] < 1:
        module.fail_json(msg="duration must be at least 1 second, got %d" % p["duration"])
    name = node_lease_name(p["node"])
    where = "%s/%s" % (p["namespace"], name)
    try:
        lease = Lease(
            connect(p["kubeconfig"] or None, p["context"] or None),
            p["namespace"],
            name,
            p["holder"],
            p["duration"],
        )
        current = lease.current_holder()
        if p["state"] == "released":
            mine = current == p["holder"]
            if mine and not module.check_mode:
                lease.release()
            module.exit_json(changed=mine, lease=where, holder=None if mine else current)
        if current not in (None, p["holder"]):
            module.fail_json(
                msg="node %s is being worked on: Lease %s is held by %s; try again when it "
                "is released" % (p["node"], where, current),
                lease=where,
                holder=current,
            )
        if not module.check_mode and not lease.try_acquire():
            current = lease.current_holder()
            module.fail_json(
                msg="node %s: Lease %s was taken by %s just now; try again later"
                % (p["node"], where, current),
                lease=where,
                holder=current,
            )
        module.exit_json(changed=current != p["holder"], lease=where, holder=p["holder"])
    except FleetmedicError as exc:
        module.fail_json(
            msg="cannot %s the node Lease %s: %s (%s)"
            % (
                "give up" if p["state"] == "released" else "take",
                where,
                one_line(exc),
                NO_LOCK_HINT,
            ),
            lease=where,
        )


if __name__ == "__main__":
    main()
