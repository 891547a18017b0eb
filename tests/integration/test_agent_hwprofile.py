"""Hardware profiles through the real agent on the nspawn fleet, against the real API server
(issue 20 tests, "Profiles").

Each case is one kwok Node labelled ``node.kubernetes.io/instance-type: h100-ib.8x`` and
``fleetmedic.io/gpu-vendor: nvidia`` (no expected-gpus label: only the profile knows there
should be 8), whose agent runs ``fleetmedic agent --once`` inside a fleet node's network
namespace with that node's files: the fake libnvidia-ml.so.1 reads an NVML scenario from the
node's state directory, and the RDMA ports are a sysfs tree there
(tests/harness/rdma_sysfs.py: the kernel's formats, sources in its docstring) that the
agent's config names as ``fabric.sysfs_root``. The profile comes from an operator's file
(``checks.hardware.profiles``). The cases run at the same time; each must leave its
finding, with the difference, in the Node's last-results annotation, and the matching node
none.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid

import pytest
import yaml

from fleetmedic.model import keys
from tests.harness.agentenv import (
    AgentProcess,
    agent_kubeconfig,
    annotation,
    h100,
    install_agent_rbac,
    remove_nodes,
)
from tests.harness.rdma_sysfs import HDR, infiniband_node, write_port

pytestmark = [pytest.mark.fleet, pytest.mark.slow]
TYPE = "node.kubernetes.io/instance-type"
PROFILES = {
    "profiles": {
        "h100-ib": {
            "match": ["h100-ib.8x"],
            "gpus": 8,
            "model": "H100",
            "memory_gib": 80,
            "nvlink_links": 18,
            "pcie_gen": 5,
            "pcie_width": 16,
            "rdma": {"count": 8, "link_layer": "InfiniBand", "rate_gbps": 400},
        }
    }
}
# case -> (NVML scenario, the finding expected in last-results or None, its category)
CASES = {
    "match": (h100(), None, None),
    "gpus": (h100(7), "profile.gpus: 7 of 8 GPUs", "gpu"),
    # a slot that trains Gen4 under a Gen5 GPU: NVML's maximum is Gen4 too, so nvidia.pcie
    # (current against maximum) passes; only the profile knows the link is downgraded
    "pcie": (
        h100(**{"3": {"pcie_gen": 4, "pcie_max_gen": 4}}),
        "profile.pcie: GPU 3 PCIe Gen4 x16, expected Gen5 x16",
        "gpu",
    ),
    "rdma": (h100(), "profile.rdma_rate: mlx5_3/1 at 200 Gb/s, expected 400", "network"),
    "memory": (
        h100(**{"5": {"memory_total_mib": 40960}}),
        "profile.memory: GPU 5 has 40 GiB, expected 80",
        "gpu",
    ),
}


@pytest.fixture(scope="module")
def cases(fleet, kube, fakes, tmp_path_factory):
    """Per case: a kwok Node, the agent's identity on it, and its files in a fleet node's
    state directory (removed afterwards)."""
    install_agent_rbac(kube)
    tmp = tmp_path_factory.mktemp("hwprofile")
    profiles = tmp / "profiles.yaml"
    profiles.write_text(yaml.safe_dump(PROFILES))
    prefix = f"hwp-{uuid.uuid4().hex[:5]}"
    names = {case: f"{prefix}-{case}" for case in CASES}
    kube.make_nodes(list(names.values()), labels={TYPE: "h100-ib.8x", keys.LABEL_VENDOR: "nvidia"})
    server = kube.server_url(fleet.host_address)
    out = {}
    for i, (case, (scenario, _, _)) in enumerate(CASES.items()):
        node = fleet.node(1 + i % len(fleet.nodes))
        files = node.state_dir / "hwprofile" / case
        files.mkdir(parents=True, exist_ok=True)
        (files / "nvml.json").write_text(json.dumps(scenario))
        infiniband_node(files / "sys")
        if case == "rdma":
            write_port(files / "sys", "mlx5_3", rate=HDR)  # the port trained at HDR
        config = tmp / f"{case}.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "checks": {
                        "hardware": {"profiles": str(profiles)},
                        "fabric": {"sysfs_root": str(files / "sys")},
                    }
                }
            )
        )
        agent = AgentProcess(
            names[case],
            agent_kubeconfig(kube, names[case], tmp / f"{case}.kc", server=server),
            tmp / f"{case}.log",
            netns=node.netns,
            env={
                "LD_LIBRARY_PATH": str(fakes / "lib"),
                "FLEETMEDIC_FAKE_NVML": str(files / "nvml.json"),
            },
            args=["--config", str(config), "--once", "--timeout", "10"],
        )
        out[case] = agent
    yield names, out
    remove_nodes(kube, list(names.values()))
    for node in fleet.nodes:
        shutil.rmtree(node.state_dir / "hwprofile", ignore_errors=True)


def test_each_mismatch_is_a_finding_with_the_difference_and_a_matching_node_passes(kube, cases):
    names, agents = cases
    t0 = time.monotonic()
    procs = {
        case: subprocess.Popen(
            a.argv, env=a.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for case, a in agents.items()
    }
    runs = {case: p.communicate(timeout=120) for case, p in procs.items()}
    print(f"\n{len(runs)} agents --once, side by side: {time.monotonic() - t0:.1f}s")
    for case, (stdout, stderr) in runs.items():
        assert procs[case].returncode == 0, f"{case}: {stderr[-2000:]}"
        assert f"hardware profile h100-ib ({TYPE}=h100-ib.8x)" in stderr, stderr[-2000:]
        _, finding, category = CASES[case]
        results = annotation(kube, names[case], keys.ANN_LAST_RESULTS)
        strikes = json.loads(stdout)["strikes"]
        if finding is None:
            assert results["gpu"]["status"] == "ok", results
            assert results["network"]["status"] == "ok", results
            assert strikes == {"gpu": 0, "network": 0}
            continue
        other = "network" if category == "gpu" else "gpu"
        # the finding, and only it, is what the node reports: the difference is the evidence
        assert results[category] == {
            "status": "problem",
            "detail": finding,
            "since": results[category]["since"],
        }, (case, results)
        assert results[other]["status"] == "ok", (case, results)
        assert strikes == {category: 1, other: 0}, (case, strikes)  # the strike path
