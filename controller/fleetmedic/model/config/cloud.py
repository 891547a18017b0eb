"""Config section for the ``replace`` rung: how a node is handed to its cloud for a new one."""

from __future__ import annotations

from typing import Literal

from fleetmedic.model.config.types import Section

Via = Literal["delete_node", "auto_scaling_group"]


class CloudConfig(Section):
    """Where a replaced node's successor comes from. Per profile: one pool may be
    Karpenter-managed, another an Auto Scaling group."""

    replace_via: Via = "delete_node"
    """`delete_node`: delete the Node object, and the node provisioner (Karpenter's
    termination finalizer) terminates the instance and launches a new one for the pending
    pods. Needs the opt-in grant of deploy/controller/replace-nodes.yaml. `auto_scaling_group`:
    terminate the instance (from the Node's spec.providerID, aws:///zone/i-...) through its
    Auto Scaling group without decrementing desired capacity, so the group launches a
    successor (playbooks/replace.yml, amazon.aws; the cloud controller then removes the
    Node)."""
    region: str | None = None
    """AWS region of the group (`auto_scaling_group`). Unset: the availability zone in the
    providerID minus its letter, else boto's own (AWS_REGION, the bastion's profile)."""
    endpoint_url: str | None = None
    """AWS API endpoint (`auto_scaling_group`), e.g. a VPC endpoint. Unset: AWS's public
    one. Credentials are never here: boto's chain (the bastion's instance role, or
    AWS_* in ansible.env or the unit's environment)."""
