"""The replace rung end to end, on real parts: the real API server (kwok Nodes), ``fleetmedic
run`` as a subprocess, a real SMTP sink and chat receiver, and for the Auto Scaling path
moto's server mode (EC2 and Auto Scaling over HTTP, the only stand-in) driven by the
shipped playbooks/replace.yml through amazon.aws. No SSH: these pools' replace rung is
drain, notify, replace (the default's diagnose needs a node that answers).

- Karpenter-style pool, the controller with exactly the shipped RBAC plus the opt-in
  replace-nodes.yaml: of two faulty nodes with ``max_replacements_per_day: 1``, one is
  drained, announced (email and chat, with its evidence, while its Node still exists) and
  its Node deleted; the other waits fenced, unannounced, also after a controller restart
  (the day's record is on the ConfigMap).
- Auto Scaling group: the controller is SIGKILLed once the group has taken the instance,
  before it can record that: the next one finishes the hand-off without terminating
  anything else; desired capacity unchanged, one email, one ``replaced`` in the history.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from fleetmedic.model import keys
from tests.harness import ctlenv, ctlwait
from tests.harness.cloud import CREDENTIALS, MotoServer
from tests.harness.ctlbench import pool_name
from tests.harness.ctlenv import ControllerProcess, history, wait_until
from tests.harness.ctlrbac import NAMESPACE, SA, install_controller_rbac, manifests
from tests.harness.manifests import apply, remove
from tests.harness.smtp import attachments, body_text

pytestmark = [pytest.mark.kube, pytest.mark.slow]

FINDING = {"summary": "Xid 79: GPU has fallen off the bus (GPU 3)", "code": 79}


@pytest.fixture(scope="module")
def cloud(tmp_path_factory):
    with MotoServer(tmp_path_factory.mktemp("moto")) as server:
        yield server


def config(api, workdir: Path, pool: str, smtp, hook, **overrides) -> Path:
    """A pool whose ladder is replace, then manual; no SSH key is ever used."""
    ssh = workdir / "ssh"
    ssh.mkdir(parents=True, exist_ok=True)
    for f in ("id", "known_hosts"):
        (ssh / f).touch()
    no_fleet = SimpleNamespace(private_key=ssh / "id", known_hosts=ssh / "known_hosts")
    base = {
        "ladder": {
            "order": ["replace", "manual"],
            "replace": {"phases": ["drain", "notify", "replace"]},
        },
        "notify": {
            "retry_interval": 1,
            "targets": [{"name": "oncall", "url": hook.url(pool), "events": ["escalation"]}],
        },
    }
    ctlenv._merge(base, overrides)
    return ctlenv.write_config(workdir, api, no_fleet, pool, smtp, base)


def make_node(kube, pool: str, name: str, **spec) -> str:
    kube.make_nodes(
        [name],
        labels={ctlenv.POOL_LABEL: pool, "fleetmedic.io/gpu-vendor": "nvidia"},
        annotations={keys.ANN_LAST_FINDING: json.dumps(FINDING)},
        addresses=["192.0.2.10"],
        taints=[ctlenv.repair_taint("reboot")],  # the agent fenced it; this ladder replaces
    )
    if spec:
        kube.request(
            "PATCH",
            f"/api/v1/nodes/{name}",
            {"spec": spec},
            content_type="application/merge-patch+json",
        )
    return name


def gone(kube, name: str) -> bool:
    return not kube.request("GET", f"/api/v1/nodes/{name}", ok=(404,)).get("metadata")


def events(kube, name: str) -> list[str]:
    items = kube.request(
        "GET", f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D{name}"
    )["items"]
    return [e["reason"] for e in items]


def audit(log: Path, node: str, what: str) -> list[dict]:
    text = log.read_text(errors="replace").splitlines()
    lines = [json.loads(x[x.index("{") :]) for x in text if '"audit": true' in x]
    return [a for a in lines if a["node"] == node and a["what"] == what]


def announced(smtp_sink, hook, name: str, via: str) -> None:
    """One email and one chat message, each saying the node is being replaced, with its
    evidence (the attempts and the last finding, read from the Node before it went)."""
    [msg] = [m for m in smtp_sink.messages if name in m["Subject"]]
    assert f"{name} is being replaced" in msg["Subject"], msg["Subject"]
    body = body_text(msg)
    assert f"is being replaced ({via})" in body and FINDING["summary"] in body, body[:2000]
    [report] = [v for k, v in attachments(msg).items() if k.endswith("-escalation.json")]
    sent = json.loads(report)
    assert sent["replaced_via"] == via and sent["last_finding"] == FINDING
    chat = hook.wait_for(lambda r: name in r.body.get("title", ""))
    assert "is being replaced" in chat.body["title"] and "Xid 79" in chat.body["message"]


def test_karpenter_pool_deletes_one_node_and_holds_the_next_for_the_day(
    kube, tmp_path, smtp_sink, webhook
):
    pool = pool_name("rk")
    install_controller_rbac(kube)
    grant = manifests(["replace-nodes.yaml"])
    for doc in grant:
        apply(kube, doc)
    names = [make_node(kube, pool, f"{pool}-{i}") for i in range(2)]
    ns = f"w{pool}"
    pods = {n: kube.make_pods(n, 1, namespace=ns)[0]["metadata"]["name"] for n in names}
    cfg = config(
        kube,
        tmp_path,
        pool,
        smtp_sink,
        webhook,
        kube={"kubeconfig": kube.kubeconfig_for_serviceaccount(NAMESPACE, SA)},
        leader_election={"namespace": NAMESPACE, "lease_name": f"fleetmedic-{pool}"},
        safety={"pause_configmap": f"{NAMESPACE}/fleetmedic"},
        # one profile for the pool: its day's record has a key of its own on the shared
        # ConfigMap (replacements.<profile>)
        profiles=[
            {
                "name": pool,
                "selector": f"{ctlenv.POOL_LABEL}={pool}",
                "cloud": {"replace_via": "delete_node"},
                "safety": {"max_replacements_per_day": 1},
            }
        ],
    )
    started = time.monotonic()
    proc = ControllerProcess(cfg, tmp_path / "controller.log").start()
    try:

        def one_gone_one_held():
            assert proc.alive, proc.tail()
            done = [n for n in names if gone(kube, n)]
            return len(done) == 1 and "ReplaceHeld" in events(kube, _other(names, done[0]))

        wait_until(one_gone_one_held, 60, "one Node deleted, the other held")
        elapsed = time.monotonic() - started
        [deleted] = [n for n in names if gone(kube, n)]
        held = _other(names, deleted)
        announced(smtp_sink, webhook, deleted, "delete_node")
        left = {
            p["metadata"]["name"]
            for p in kube.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
        }
        assert pods[deleted] not in left, "drained (evicted) before its Node was deleted"
        [line] = audit(proc.log, deleted, "replace")
        assert (line["outcome"], line["message"]) == ("ok", "Node deleted"), line
        assert len(audit(proc.log, deleted, "email")) == 1
        record = kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps/fleetmedic")
        day = json.loads(record["data"][f"replacements.{pool}"])
        assert [(e["node"], e["ep"]) for e in day] == [(deleted, 1)]
        fl = ctlenv.annotation(kube, held, keys.ANN_IN_FLIGHT)
        assert (fl["step"], fl["phase"], fl["status"]) == ("replace", "notify", "pending")
        assert ctlenv.state_of(kube, held) == "replace" and ctlenv.node(kube, held)["spec"].get(
            "unschedulable"
        ), "held fenced and cordoned"
        log = proc.log.read_text(errors="replace")
        assert "HTTP 403" not in log, log[-3000:]
        port = yaml.safe_load(cfg.read_text())["metrics"]["port"]
        series = 'fleetmedic_replacements_total{{outcome="{}",profile="{}",via="delete_node"}}'
        assert ctlenv.scrape(port, series.format("ok", pool)) == 1.0
        assert (ctlenv.scrape(port, series.format("held", pool)) or 0) >= 1.0
    finally:
        proc.stop()
    # a restart: the day's record is on the ConfigMap, so the held node stays held
    again = ControllerProcess(cfg, tmp_path / "controller2.log").start()
    try:
        up(cfg, again)
        ctlwait.looked_again(kube, cfg, held)
        assert not gone(kube, held) and history(kube, held) == []
        assert ctlenv.state_of(kube, held) == "replace"
    finally:
        again.stop()
        for doc in grant:
            remove(kube, doc)
        kube.delete_nodes(names)
    assert [m["Subject"] for m in smtp_sink.messages if held in m["Subject"]] == []
    assert len(smtp_sink.messages) == 1
    print(f"karpenter: fenced -> Node deleted in {elapsed:.1f}s")


def up(cfg: Path, proc: ControllerProcess) -> None:
    """Until the (re)started controller has run a cycle as the leader."""

    def cycled():
        assert proc.alive, proc.tail()
        return ctlwait.cycles(cfg) >= 1

    wait_until(cycled, 30, "the controller's first cycle", tolerate=(OSError,))


def _other(names: list[str], name: str) -> str:
    return next(n for n in names if n != name)


def test_asg_pool_terminates_through_the_group_once_across_a_sigkill(
    kube, tmp_path, smtp_sink, webhook, cloud
):
    pool = pool_name("ra")
    group = cloud.auto_scaling_group(f"gpu-{pool}", desired=2)
    instance, sibling = sorted(group.instances)
    name = make_node(kube, pool, f"{pool}-0", providerID=group.provider_id(instance))
    kube.request(
        "POST",
        "/api/v1/namespaces/kube-system/configmaps",
        {"metadata": {"name": f"fleetmedic-{pool}"}, "data": {}},
    )
    cfg = config(
        kube,
        tmp_path,
        pool,
        smtp_sink,
        webhook,
        cloud={"replace_via": "auto_scaling_group", "endpoint_url": cloud.url},
        ansible={"env": dict(CREDENTIALS)},
    )
    started = time.monotonic()
    proc = ControllerProcess(cfg, tmp_path / "controller.log").start()
    try:
        # the kill: as soon as the group has taken the instance, before the controller can
        # have recorded it (the playbook still has a task to run)
        wait_until(
            lambda: proc.alive and cloud.terminated([instance]),
            60,
            f"{instance} terminated",
            interval=0.05,
        )
    finally:
        proc.kill9()
    recorded = [a["result"] for a in history(kube, name)]
    again = ControllerProcess(cfg, tmp_path / "controller2.log").start()
    try:

        def replaced():
            assert again.alive, again.tail()
            return keys.ANN_REPLACED in ctlenv.node(kube, name)["metadata"]["annotations"]

        wait_until(replaced, 60, f"{name} recorded as replaced")
        elapsed = time.monotonic() - started
        ctlwait.looked_again(kube, cfg, name)
    finally:
        again.stop()
    after = cloud.group(group.name)
    assert after.desired == 2, "desired capacity kept"
    assert instance not in after.instances and sibling in after.instances
    assert sorted(after.instances.values()) == ["InService", "InService"], after
    assert cloud.terminated([sibling, *after.instances]) == [], "nothing else terminated"
    assert [(a["step"], a["result"]) for a in history(kube, name)] == [("replace", "replaced")]
    lines = audit(proc.log, name, "replace") + audit(again.log, name, "replace")
    said = [a["message"] for a in lines if a["outcome"] == "ok"]
    assert said in (
        [
            f"instance {instance} terminated through Auto Scaling group {group.name}, "
            "desired capacity kept"
        ],
        [f"instance {instance} terminating or terminated already (an earlier run)"],
    ), said
    assert history(kube, name)[0]["message"].endswith(said[0])
    node = ctlenv.node(kube, name)
    assert ctlenv.state_of(kube, name) == "replace" and node["spec"].get("unschedulable")
    assert keys.ANN_IN_FLIGHT not in node["metadata"]["annotations"]
    announced(smtp_sink, webhook, name, "auto_scaling_group")
    assert len(smtp_sink.messages) == 1, [m["Subject"] for m in smtp_sink.messages]
    # the Node stays until a cloud-controller-manager removes it; status says why
    [row] = [r for r in json.loads(ctlenv.cli(cfg, "status", "--json").stdout) if r["name"] == name]
    assert row["state"] == "replace" and row["doing"].startswith("handed to the cloud at ")
    kube.delete_nodes([name])
    print(
        f"asg: fenced -> replaced in {elapsed:.1f}s across a SIGKILL "
        f"(killed with the history at {recorded or 'nothing'}; "
        f"{'recorded by the first' if not said[0].endswith('(an earlier run)') else 'resumed'})"
    )
