"""The agent against the real API server (no fleet): its RBAC and admission policies,
the kernel-log path across restarts, shutdown and API outages.

Every agent here is the real ``fleetmedic agent`` process with the real identity of
deploy/agent: the ServiceAccount with exactly its ClusterRole and Role, and a token
bound to a Pod on its Node (so the admission policy sees the node name).
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid

import pytest

from fleetmedic.adapters.kube import connect
from fleetmedic.errors import PermanentError
from fleetmedic.model import keys, nodeedit
from fleetmedic.model.vocabulary import TaintName, preset
from tests.harness.agentenv import (
    AgentProcess,
    agent_kubeconfig,
    annotation,
    append,
    banner,
    clear_taints,
    get_node,
    h100,
    install_agent_rbac,
    manifests,
    nvml_env,
    remove_nodes,
    set_annotations,
    taint_keys,
    wait_until,
    xid_line,
)
from tests.harness.ctlenv import free_port, scrape

VOCAB = preset()
REBOOT = "fleetmedic.io/repair=reboot"


@pytest.fixture(scope="module")
def rbac(kube):
    install_agent_rbac(kube)
    return kube


@pytest.fixture
def nodes(rbac):
    """``nodes(n, **make_nodes_kwargs)`` -> names of new kwok Nodes, deleted (with their
    agent Pods) afterwards, so no other test sees fenced nodes of ours."""
    made: list[str] = []

    def make(n: int = 2, **kwargs) -> list[str]:
        prefix = f"agk-{uuid.uuid4().hex[:5]}"
        names = [f"{prefix}-{i}" for i in range(1, n + 1)]
        rbac.make_nodes(names, **kwargs)
        made.extend(names)
        return names

    yield make
    remove_nodes(rbac, made)


def denied(fn) -> str:
    with pytest.raises(PermanentError) as err:
        fn()
    return str(err.value)


def test_agent_token_patches_its_own_node_and_is_denied_on_another(rbac, nodes, tmp_path):
    kube = rbac
    mine, other = nodes(
        2, taints=[{"key": "example.com/team", "value": "a", "effect": "NoSchedule"}]
    )
    api = connect(str(agent_kubeconfig(kube, mine, tmp_path / "kc")))
    strikes = lambda n: nodeedit.set_annotation(n, keys.ANN_STRIKES, '{"gpu":1,"network":0}')  # noqa: E731

    # The policy takes effect once the API server has loaded it: wait for the first denial.
    def other_denied():
        try:
            api.update_node(other, strikes)
        except PermanentError as exc:
            return str(exc)
        set_annotations(kube, other, {keys.ANN_STRIKES: None})  # written before the policy loaded
        return None

    msg = wait_until("the admission policy to deny another node", other_denied, 20, 0.5)
    assert (
        "HTTP 403" in msg
        and f"the fleetmedic agent on node {mine} may not change node {other}" in msg
    )

    # its own node: strikes, results, finding, a repair taint, slow-network on and off
    api.update_node(mine, strikes)
    api.update_node(mine, lambda n: nodeedit.add_taint(n, VOCAB.reboot))
    api.update_node(mine, lambda n: nodeedit.add_taint(n, VOCAB.slow_network))
    api.update_node(mine, lambda n: nodeedit.remove_taint(n, VOCAB.slow_network))
    node = get_node(kube, mine)
    assert node["metadata"]["annotations"][keys.ANN_STRIKES] == '{"gpu":1,"network":0}'
    assert taint_keys(kube, mine) == {"example.com/team=a", REBOOT}

    # ... but nothing else on it
    for what, edit, fragment in [
        ("label", lambda n: nodeedit.set_label(n, keys.LABEL_STATE, "healthy"), "labels"),
        (
            "controller annotation",
            lambda n: nodeedit.set_annotation(n, keys.ANN_HISTORY, "[]"),
            "annotations",
        ),
        (
            "foreign annotation",
            lambda n: nodeedit.set_annotation(n, "example.com/x", "1"),
            "annotations",
        ),
        (
            "foreign taint",
            lambda n: nodeedit.remove_taint(n, TaintName("example.com/team", "a")),
            "not fleetmedic's",
        ),
        (
            "remove repair",
            lambda n: nodeedit.remove_taint(n, VOCAB.reboot),
            "may not remove a repair taint",
        ),
        ("cordon", lambda n: nodeedit.set_unschedulable(n, True), "cordon"),
    ]:
        assert fragment in denied(lambda edit=edit: api.update_node(mine, edit)), what
    assert "cannot list resource" in denied(api.list_nodes)
    assert "cannot delete" in denied(lambda: api._call("delete", "DELETE", f"/api/v1/nodes/{mine}"))

    # Events: about its own node only
    api.post_event(get_node(kube, mine), "FleetmedicTest", "own")
    api.post_event(get_node(kube, other), "FleetmedicTest", "other")
    events = kube.request("GET", "/api/v1/namespaces/default/events")["items"]
    about = {e["involvedObject"]["name"] for e in events if e["reason"] == "FleetmedicTest"}
    assert about == {mine}


def test_a_token_not_bound_to_a_pod_on_a_node_is_denied(rbac, nodes, tmp_path):
    kube = rbac
    (mine,) = nodes(1)
    path = kube.kubeconfig_for_serviceaccount(
        "fleetmedic", "fleetmedic-agent"
    )  # plain TokenRequest
    api = connect(path)
    msg = wait_until(
        "a denial",
        lambda: _error_of(
            lambda: api.update_node(
                mine, lambda n: nodeedit.set_annotation(n, keys.ANN_STRIKES, "{}")
            )
        ),
        20,
        0.5,
    )
    assert "must be bound to a Pod on a Node" in msg


def _error_of(fn) -> str | None:
    try:
        fn()
    except PermanentError as exc:
        return str(exc)
    return None


def test_daemonset_manifest_is_accepted_by_the_api_server(rbac):
    kube = rbac
    (ds,) = [d for d in manifests() if d["kind"] == "DaemonSet"]
    path = f"/apis/apps/v1/namespaces/{ds['metadata']['namespace']}/daemonsets?dryRun=All"
    status = kube.request("POST", path, ds, ok=(422,))
    # The test API server runs without --allow-privileged; that must be the only objection.
    if status.get("kind") == "Status":
        causes = status["details"]["causes"]
        assert [c["field"] for c in causes] == [
            "spec.template.spec.containers[0].securityContext.privileged"
        ]
        ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"] = False
        assert kube.request("POST", path, ds)["kind"] == "DaemonSet"
    spec = ds["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "fleetmedic-agent" and spec["tolerations"] == [
        {"operator": "Exists"}
    ]
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


# -- the agent process ------------------------------------------------------------------
@pytest.fixture
def agent_env(rbac, nodes, tmp_path):
    """One kwok Node, its kernel log, boot id file and the agent's identity."""
    (name,) = nodes(1, labels={keys.LABEL_VENDOR: "none"})
    kern = tmp_path / "kern.log"
    kern.write_text(banner() + "[    1.000000] kernel: clean boot\n")
    boot = tmp_path / "boot_id"
    boot.write_text(f"{uuid.uuid4()}\n")
    kc = agent_kubeconfig(rbac, name, tmp_path / "kc")
    started: list[AgentProcess] = []

    def agent(*args: str, log: str = "agent.log", kubeconfig=None, env=None) -> AgentProcess:
        a = AgentProcess(
            name,
            kubeconfig or kc,
            tmp_path / log,
            kernel_log=kern,
            boot_id_file=boot,
            args=["--interval", "1", *args],
            env=env,
        )
        started.append(a.start())
        return a

    yield name, kern, agent
    for a in started:
        a.stop()


def following(a: AgentProcess, count: int = 1) -> None:
    wait_until(
        "the agent to follow its kernel log",
        lambda: a.output().count(": following (") >= count,
        60,
        0.05,
        a.tail,
    )


def caught_up(a: AgentProcess, kern) -> None:
    """Append a line the agent logs but never acts on (Xid 43, action ``none``) and wait
    for its log line: the agent has handled every line before it (one thread, in order)."""
    append(kern, xid_line(code=43, uptime=900.0, text="fleetmedic-test: caught up."))
    n = len(kern.read_text().splitlines())
    wait_until(
        f"the agent to handle line {n}",
        lambda: f"at line {n} (none)" in a.output(),
        30,
        0.05,
        a.tail,
    )


def test_xid_fences_at_once_and_restarts_neither_refence_nor_miss_lines(rbac, agent_env):
    kube = rbac
    node, kern, agent = agent_env
    port = free_port()
    a = agent("--metrics-port", str(port))
    following(a)
    t0 = time.monotonic()
    append(kern, xid_line(bus=0x3B, uptime=120.5))
    wait_until("repair=reboot", lambda: REBOOT in taint_keys(kube, node), 5, 0.01, a.tail)
    latency = time.monotonic() - t0
    print(f"\nXid 79 line -> taint visible: {latency * 1000:.0f} ms")
    assert latency < 1.0
    # the running agent scraped over HTTP: the finding, its checks, its last write
    wait_until(
        "the agent's metrics",
        lambda: (
            scrape(port, 'fleetmedic_agent_findings_total{action="reboot",code="79",kind="xid"}')
            == 1
        ),
        10,
        0.1,
        a.tail,
    )
    assert scrape(port, "fleetmedic_agent_last_write_timestamp_seconds") > time.time() - 60
    wait_until(
        "a check round counted",
        lambda: scrape(port, 'fleetmedic_agent_strikes{category="network"}') is not None,
        10,
        0.1,
        a.tail,
    )
    mark = annotation(kube, node, keys.ANN_LAST_FINDING)
    assert mark["rule"] == "xid.79" and mark["pci"] == "0000:3b:00" and mark["acted"] is True
    wait_until(
        "the Event",
        lambda: [
            e
            for e in kube.request("GET", "/api/v1/namespaces/default/events")["items"]
            if e["involvedObject"]["name"] == node and e["reason"] == "FleetmedicFenced"
        ],
        5,
        0.1,
    )
    assert a.stop() == 0 and REBOOT in taint_keys(kube, node)  # SIGTERM leaves the taint

    clear_taints(kube, node)  # the controller repaired it
    b = agent(log="agent2.log")
    following(b)
    wait_until(
        "the stale line to be recognised",
        lambda: "was handled before" in b.output(),
        10,
        0.05,
        b.tail,
    )
    caught_up(b, kern)
    assert taint_keys(kube, node) == set(), b.tail()
    b.stop()

    append(kern, xid_line(bus=0x5A, uptime=300.25))  # while no agent runs
    c = agent(log="agent3.log")
    wait_until(
        "the missed line to fence", lambda: REBOOT in taint_keys(kube, node), 60, 0.05, c.tail
    )
    assert annotation(kube, node, keys.ANN_LAST_FINDING)["pci"] == "0000:5a:00"
    assert "was handled before" in c.output()  # the first Xid, still not acted on


def test_lines_of_an_earlier_boot_never_fence(rbac, agent_env):
    kube = rbac
    node, kern, agent = agent_env
    kern.write_text(
        banner() + xid_line(uptime=50.0) + banner() + "[    2.000000] kernel: clean boot\n"
    )
    a = agent()
    wait_until(
        "the agent to follow its kernel log",
        lambda: "current boot from line 3" in a.output(),
        60,
        0.05,
        a.tail,
    )
    caught_up(a, kern)
    assert taint_keys(kube, node) == set(), a.tail()
    append(kern, banner() + xid_line(uptime=50.0))  # the same text in the next boot counts
    wait_until("repair=reboot", lambda: REBOOT in taint_keys(kube, node), 5, 0.02, a.tail)


def test_sigterm_changes_nothing(rbac, agent_env):
    kube = rbac
    node, _, agent = agent_env
    kube.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        {"spec": {"taints": [VOCAB.slow_network.as_taint()]}},
        content_type="application/merge-patch+json",
    )
    set_annotations(kube, node, {keys.ANN_STRIKES: '{"gpu":2,"network":2}'})
    before = get_node(kube, node)
    a = agent("--vendor", "none")
    following(a)
    # a whole round written first: the SIGTERM comes to an agent in its steady state
    wait_until("a round of the agent", lambda: " round 1: " in a.output(), 60, 0.05, a.tail)
    assert a.stop() == 0
    after = get_node(kube, node)
    assert after["spec"]["taints"] == before["spec"]["taints"]
    assert after["metadata"]["annotations"][keys.ANN_STRIKES] == '{"gpu":2,"network":2}'
    assert "stopped; taints and strikes left as they are" in a.output()


class Proxy:
    """A TCP forwarder to the API server that can be cut and restored (an outage)."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.listener: socket.socket | None = None
        self.dropped = 0  # connections the outage dropped

    def up(self) -> None:
        self._listen(self._accept)

    def down(self) -> None:
        """The outage: every connection is accepted and dropped at once (an API server
        behind a load balancer that is gone), counted in :attr:`dropped`."""
        self._listen(self._drop)

    def _listen(self, serve) -> None:
        self._close()
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", self.port))
        self.listener.listen(16)
        threading.Thread(target=serve, args=(self.listener,), daemon=True).start()

    def _drop(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            self.dropped += 1
            client.close()

    def close(self) -> None:
        self._close()

    def _close(self) -> None:
        if self.listener:
            try:
                self.listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
            except OSError:
                pass
            self.listener.close()
            self.listener = None
        for c in self.conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()
        self.conns.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def test_api_outage_keeps_the_agent_and_its_strikes(rbac, agent_env, tmp_path, fakes):
    kube = rbac
    node, _, agent = agent_env
    kube.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        {"metadata": {"labels": {keys.LABEL_VENDOR: "nvidia", keys.LABEL_EXPECTED_GPUS: "8"}}},
        content_type="application/merge-patch+json",
    )
    (tmp_path / "nvml.json").write_text(json.dumps(h100(**{"3": {"ecc_volatile_uncorrected": 2}})))
    proxy = Proxy(kube.port)
    proxy.up()
    kc = tmp_path / "kc-proxy"
    kc.write_text(
        (tmp_path / "kc").read_text().replace(kube.url, f"https://127.0.0.1:{proxy.port}")
    )
    # rounds 2 s apart: the outage starts well before the second strike could be written
    a = agent(
        "--interval",
        "2",
        "--timeout",
        "5",
        "--retry-cap",
        "1",
        kubeconfig=kc,
        env=nvml_env(tmp_path),
    )
    strikes = lambda: (annotation(kube, node, keys.ANN_STRIKES) or {}).get("gpu")  # noqa: E731
    wait_until("strike 1", lambda: strikes() == 1, 60, 0.05, a.tail)
    proxy.down()
    # the agent kept trying through the outage (a round is due every 2 s; its retries are
    # at most 1 s apart): several connections dropped, not a fixed time slept
    wait_until(
        "the agent to retry through the outage", lambda: proxy.dropped >= 6, 60, 0.05, a.tail
    )
    assert a.alive(), a.tail()
    assert strikes() == 1 and REBOOT not in taint_keys(kube, node), a.tail()
    assert a.output().count("API server unavailable") == 1, a.tail()  # one line per outage
    proxy.up()
    wait_until(
        "the third strike's taint", lambda: REBOOT in taint_keys(kube, node), 30, 0.1, a.tail
    )
    wait_until(
        "the fence in the log",
        lambda: "3 consecutive GPU check failures" in a.output(),
        10,
        0.05,
        a.tail,
    )
    assert "API server reachable again" in a.output()
    proxy.close()
