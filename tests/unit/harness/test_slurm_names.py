"""The Slurm test cluster's network names stay apart from the fleets' and the meshes', so
no harness's sweep of leftovers (fleet_sys, mesh_net, slurm) removes another's objects."""

from __future__ import annotations

from tests.harness import fleet_net, mesh_net, slurm


def test_slurm_names_are_not_fleet_or_mesh_shaped_and_back():
    ours = [slurm.bridge_name(224), slurm.netns_name(239, "n1"), slurm.veth_name(230, 12)]
    fleet = [fleet_net.bridge_name(240), fleet_net.netns_name(240, "node-1"), "fm254v3"]
    mesh = [f"{mesh_net.NETNS_PREFIX}m123-1-exec-1", "fmrx240e2"]
    assert all(slurm.is_ours(n) for n in ours)
    assert not any(slurm.is_ours(n) for n in fleet + mesh)
    assert not any(fleet_net._NETNS_RE.match(n) or fleet_net._LINK_RE.match(n) for n in ours)
    assert not any(mesh_net.LINK_RE.match(n) or n.startswith(mesh_net.NETNS_PREFIX) for n in ours)


def test_slurm_subnets_are_not_the_fleets():
    assert not set(slurm.OCTETS) & set(fleet_net.OCTETS)
    assert all(len(slurm.veth_name(o, 200)) <= 15 for o in slurm.OCTETS)  # IFNAMSIZ
