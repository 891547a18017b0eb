"""``fleetmedic watch loki --slurm-conf``: the Loki source fencing Slurm nodes through the
same adapter as the agent (adapters/slurmdoc.py), against a real Loki and the real
slurmctld/slurmd: an Xid 79 in a node's kernel-log stream drains it with our reason and
the finding in Extra; a node someone else drained is not written; a cursor file, no
ConfigMap."""

from __future__ import annotations

import json
import subprocess

from tests.harness.agentenv import FLEETMEDIC
from tests.harness.loki import kernel_labels

XID79 = (
    "[ 8812.412345] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus."
)


def watch(loki, slurm, cursor, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            str(FLEETMEDIC),
            "watch",
            "loki",
            "--endpoint",
            loki.url,
            "--cursor-file",
            str(cursor),
            "--slurm-conf",
            slurm.env["SLURM_CONF"],
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_loki_lines_drain_slurm_nodes_with_our_reason(loki_factory, slurm, tmp_path):
    loki = loki_factory()
    cursor = tmp_path / "cursor.json"
    theirs = "NHC: check_hw_ib: no port ACTIVE"
    slurm.run("scontrol", "update", "nodename=n2", "state=drain", f"reason={theirs}")
    try:
        loki.push(kernel_labels("promtail", node="n1"), ["[ 8812.400000] eth0: link up", XID79])
        loki.push(kernel_labels("otel", node="n2"), [XID79])
        loki.wait_for('{node_name="n1"}', 2)
        r = watch(loki, slurm, cursor, "--once")
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        assert got["fenced"] == 2 and got["unattributed"] == 0, got
        nodes = slurm.nodes()
        assert nodes["n1"]["reason"].startswith("fleetmedic: reboot: xid.79 0000:3b:00"), nodes
        mark = json.loads(
            json.loads(nodes["n1"]["extra"])["fleetmedic"]["fleetmedic.io/last-finding"]
        )
        assert mark["rule"] == "xid.79" and mark["acted"] is True
        assert nodes["n2"]["reason"] == theirs and not nodes["n2"]["extra"]  # not ours
        assert "drained by someone else" in r.stderr
        assert not nodes["n3"]["reason"]
        # the cursor file says all of it was handled
        again = watch(loki, slurm, cursor, "--once")
        assert json.loads(again.stdout)["lines"] == 0, again.stderr
    finally:
        slurm.reset_nodes()


def test_a_cursor_configmap_is_refused_on_slurm(loki_factory, slurm, tmp_path):
    loki = loki_factory()
    r = watch(loki, slurm, tmp_path / "c.json", "--once", "--cursor-configmap", "ns/name")
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "no ConfigMaps" in lines[0], r.stderr
