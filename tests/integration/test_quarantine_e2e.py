"""The quarantine rung end to end (issue 20 part 5): a real API server, one nspawn node
behind real sshd with real reboots, real Ansible through ansible-runner running
playbooks/quarantine.yml (the real `fleetmedic diag --level 3 --fabric` on the node), a
real SMTP sink and `fleetmedic run` as a subprocess. The stand-ins are the GPU side only:
the fake `dcgmi` replays a published capture from the node's scenario file, the kernel
log is the node's test file, and the RDMA ports are a sysfs tree in the kernel's formats
(tests/harness/rdma_sysfs.py: this kernel has no RDMA class).

One node, one controller, three rounds:

1. fenced for a Xid 79 and rebooted: back in service, the pass names the fault;
2. fenced for a Xid 79 again: verify passes, and the node is held for quarantine (the
   second repair for the same Xid within the window); every test passed, so it returns
   to service, and its annotation holds each test's result per GPU and the fabric's;
3. `fleetmedic quarantine NODE` on demand (a node in service: fenced at the first rung,
   rebooted, then quarantined) while dcgmi's SM Stress fails on GPU 0: the
   recommendation is replace; this pool's ladder has no replace rung, so the node goes
   to manual and the email carries the result.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.harness import ctlenv, rdma_sysfs
from tests.harness.ctlbench import Benches, pool_name
from tests.harness.ctlenv import annotation, cli, history, state_of, wait_until
from tests.harness.smtp import body_text

pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]

DCGM = Path(__file__).parents[1] / "unit" / "checks" / "data" / "dcgm"
QUARANTINE = "fleetmedic.io/quarantine"
XID79 = {"vendor": "nvidia", "kind": "xid", "code": 79, "action": "reboot",
         "pci": "0000:5a:00", "message": "GPU has fallen off the bus."}  # fmt: skip
SYSFS = "/var/lib/fleetmedic-test/sys"  # the node's view of <state_dir>/sys


def dcgmi(node, capture: str, exit_code: int = 0) -> None:
    """What the node's fake dcgmi prints next (the scenario file the fake reads)."""
    scenario = {"output": (DCGM / capture).read_text(), "exit": exit_code, "hang": 0}
    (node.state_dir / "dcgmi.json").write_text(json.dumps(scenario))


def fence_for_xid79(kube, name: str, node) -> None:
    """What the agent does on a Xid 79: the line is in this boot's kernel log (the
    verify fails until a reboot), the finding on the Node, the repair taint."""
    ctlenv.xid79(node)
    kube.request(
        "PATCH",
        f"/api/v1/nodes/{name}",
        {"metadata": {"annotations": {"fleetmedic.io/last-finding": json.dumps(XID79)}}},
        content_type="application/merge-patch+json",
    )
    ctlenv.set_taints(kube, name, lambda t: [*t, ctlenv.repair_taint("reboot")])


def test_a_node_repaired_twice_for_the_same_xid_is_quarantined_and_on_demand_too(
    kube, fleet_factory, smtp_sink, tmp_path
):
    benches = Benches(kube, fleet_factory, tmp_path)
    b = benches.new(1, pool_name("qr"))
    node = b.fleet.node(1)
    rdma_sysfs.infiniband_node(node.state_dir / "sys", ports=2)
    node.ssh(f"printf 'fabric:\\n  sysfs_root: {SYSFS}\\n' >> /etc/fleetmedic/check.yaml")
    dcgmi(node, "pass-3.1.0.txt")
    [name] = b.register()
    cfg = b.config(
        smtp_sink,
        ladder={"order": ["reboot", "manual"], "quarantine": {"enabled": True, "timeout": 2880}},
    )
    proc = b.controller(cfg)
    port = yaml.safe_load(cfg.read_text())["metrics"]["port"]
    try:
        for round_ in (1, 2):
            fence_for_xid79(kube, name, node)
            wait_until(
                lambda n=round_: (
                    proc.alive and len(history(kube, name)) == n and ctlenv.in_service(kube, name)
                ),
                240,
                f"repair {round_} to pass",
            )
        first, second = history(kube, name)
        assert (first["result"], first["phase"], first["fault"]) == ("pass", "verify", "xid.79")
        assert (second["result"], second["phase"], second["fault"]) == (
            "pass",
            "quarantine",
            "xid.79",
        )
        rec = annotation(kube, name, QUARANTINE)
        assert (rec["recommendation"], rec["level"]) == ("return-to-service", 3)
        assert rec["why"] == "repaired 2 times for xid.79 within 7d" and rec["run"]
        # every test of the capture, per GPU (its deployment rows name all 8 GPUs at once)
        tests = {(t["test"], tuple(t["gpus"]), t["result"]) for t in rec["tests"]}
        assert ("Inforom", tuple(range(8)), "pass") in tests
        assert {("software", (g,), "pass") for g in range(8)} <= tests
        assert all(t["result"] in ("pass", "skip") for t in rec["tests"]), rec["tests"]
        assert rec["fabric"] == [
            {"check": "fabric.ports", "status": "ok", "summary": "2 RDMA ports up"}
        ]
        # the node's dcgmi was asked for level 3 (the fake's own log), once: the repairs'
        # reboots run no diagnostics
        assert [(c["tool"], c["level"]) for c in node.diag_calls()] == [("dcgmi", 3)]

        # on demand, while SM Stress fails on GPU 0
        dcgmi(node, "fail-sm-stress.json", exit_code=226)
        missing = cli(cfg, "quarantine", "no-such-node")
        assert missing.returncode == 2  # (a usage error: clikit's exit codes)
        assert missing.stderr.strip() == "fleetmedic: error: node no-such-node not found"
        dry = cli(cfg, "quarantine", name, "--dry-run")
        assert (
            dry.returncode == 0
            and "would ask" in dry.stdout
            and state_of(kube, name) == ("healthy")
        )
        asked = cli(cfg, "quarantine", name)
        assert asked.returncode == 0 and "fenced at reboot" in asked.stdout, asked.stderr
        wait_until(
            lambda: proc.alive and state_of(kube, name) == "manual" and smtp_sink.messages,
            300,
            "the quarantine to send the node to manual with an email",
        )
        rec = annotation(kube, name, QUARANTINE)
        assert rec["recommendation"] == "replace" and rec["why"].startswith("requested by ")
        # once more at level 3 (the dry run asked nothing of the node)
        assert [(c["tool"], c["level"]) for c in node.diag_calls()] == [("dcgmi", 3)] * 2
        assert rec["tests"][0] == {"test": "SM Stress", "gpus": [0], "result": "fail"} | (
            {"message": rec["tests"][0]["message"]} if "message" in rec["tests"][0] else {}
        )
        assert (
            "fleetmedic.io/quarantine-request"
            not in ctlenv.node(kube, name)["metadata"]["annotations"]
        )
        [msg] = smtp_sink.messages
        assert "quarantine level 3: replace" in body_text(msg)
        status = json.loads(cli(cfg, "status", "--json").stdout)
        assert status[0]["quarantine"]["recommendation"] == "replace"
        for said, count in (("return-to-service", 1), ("replace", 1)):
            series = f'fleetmedic_quarantines_total{{recommendation="{said}"}}'
            assert ctlenv.scrape(port, series) == count, series
    finally:
        benches.stop_controllers(log_lines=80)
        benches.delete_nodes()
