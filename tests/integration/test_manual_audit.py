"""Actions taken by hand leave their audit line (issue 31 part 3 and 4): ``release``,
``quarantine`` and ``reset`` write through one helper (controller/recorder.py
``write_by_hand``: the Node, its Events, the NodeCondition, the audit line), and the
command prints that JSON line on stderr, against a real API server."""

from __future__ import annotations

import getpass
import json
import socket

import yaml

from tests.harness import ctlenv

POOL = "manaudit"


def audit_lines(stderr: str) -> list[dict]:
    out = []
    for line in stderr.splitlines():
        if line.startswith("{"):
            doc = json.loads(line)
            if doc.get("audit"):
                out.append(doc)
    return out


def events_of(kube, node: str) -> list[str]:
    got = kube.request(
        "GET", f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name={node}"
    )
    return [e["reason"] for e in got.get("items", [])]


def test_release_quarantine_and_reset_each_write_one_audit_line(kube, tmp_path):
    names = [f"{POOL}-{i}" for i in range(3)]
    kube.make_nodes(
        [names[0]], labels={ctlenv.POOL_LABEL: POOL}, taints=[ctlenv.repair_taint("manual")]
    )
    kube.make_nodes([names[1]], labels={ctlenv.POOL_LABEL: POOL})
    kube.make_nodes(
        [names[2]], labels={ctlenv.POOL_LABEL: POOL}, taints=[ctlenv.repair_taint("reboot")]
    )
    cfg = tmp_path / "controller.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "kube": {
                    "kubeconfig": kube.kubeconfig,
                    "label_selector": f"{ctlenv.POOL_LABEL}={POOL}",
                }
            }
        )
    )
    me = f"{getpass.getuser()}@{socket.gethostname()}"

    r = ctlenv.cli(cfg, "release", names[0])
    assert r.returncode == 0, r.stderr
    [line] = audit_lines(r.stderr)
    assert (line["who"], line["node"], line["what"], line["outcome"]) == (
        me,
        names[0],
        "release",
        "written",
    )
    assert line["why"] == "manual -> healthy by hand"
    assert ctlenv.taints(kube, names[0]) == []
    assert "RepairReleased" in events_of(kube, names[0])

    r = ctlenv.cli(cfg, "quarantine", names[1])
    assert r.returncode == 0, r.stderr
    [line] = audit_lines(r.stderr)
    assert (line["who"], line["node"], line["what"]) == (me, names[1], "quarantine")
    assert "QuarantineRequested" in events_of(kube, names[1])
    conditions = ctlenv.node(kube, names[1])["status"].get("conditions") or []
    assert any(c["type"] == "FleetmedicRepair" for c in conditions), conditions

    r = ctlenv.cli(cfg, "reset", "--yes")
    assert r.returncode == 0, r.stderr
    lines = audit_lines(r.stderr)
    assert sorted(x["node"] for x in lines) == [names[1], names[2]]
    assert {(x["what"], x["who"], x["outcome"]) for x in lines} == {("reset", me, "written")}
    assert all(ctlenv.taints(kube, n) == [] for n in names)
    assert "RepairReset" in events_of(kube, names[2])
