"""The agent on the nspawn test fleet, against the real API server.

Setup: one kwok Node per fleet node (InternalIP = the fleet node's address), and
each node's agent is ``fleetmedic agent`` run as a host process *inside that node's
network namespace* (``ip netns exec``). Why not as a unit inside the container:

- its traffic still leaves through the node's own veth, so ``tc`` throttling of the
  node's link applies to the iperf3 probe (and to its API calls), as on a real host;
- its files are the node's: the kernel log is the node's state-dir ``kern.log`` (the
  node sees the same file at /var/lib/fleetmedic-test/kern.log) and NVML reads the
  node's ``nvml.json`` through the fake libnvidia-ml.so.1;
- the test owns the process: SIGTERM, restart and its log need no ssh, and the code
  under test is this checkout's, not a copy in the node's venv.

The agents authenticate as deploy/agent's ServiceAccount with a token bound to a Pod on
their own Node, through the fleet bridge's host address (as a node would reach the API).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import uuid

import pytest

from fleetmedic.model import keys
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
    nvml_env,
    remove_nodes,
    set_annotations,
    taint_keys,
    wait_until,
    xid_line,
)

pytestmark = [pytest.mark.fleet, pytest.mark.slow]
REBOOT = "fleetmedic.io/repair=reboot"
SLOW = "fleetmedic.io/slow-network=true"
BAD_GPU = h100(**{"3": {"ecc_volatile_uncorrected": 2}})
OURS = {keys.ANN_STRIKES: None, keys.ANN_LAST_RESULTS: None, keys.ANN_LAST_FINDING: None}


@pytest.fixture(scope="module")
def world(fleet, kube, fakes, tmp_path_factory):
    """kwok Nodes for the fleet, each node's agent identity; node files restored afterwards."""
    install_agent_rbac(kube)
    prefix = f"agf-{uuid.uuid4().hex[:5]}"
    names = {n.index: f"{prefix}-{n.name}" for n in fleet}
    kube.make_nodes(
        list(names.values()),
        addresses={names[n.index]: n.address for n in fleet},
        labels={keys.LABEL_VENDOR: "nvidia", keys.LABEL_EXPECTED_GPUS: "8"},
    )
    tmp = tmp_path_factory.mktemp("agents")
    server = kube.server_url(fleet.host_address)
    kubeconfigs = {
        i: agent_kubeconfig(kube, name, tmp / f"{name}.kc", server=server)
        for i, name in names.items()
    }
    saved = {
        n.index: {
            f: (n.state_dir / f).read_bytes() if (n.state_dir / f).exists() else None
            for f in ("kern.log", "nvml.json")
        }
        for n in fleet
    }
    for n in fleet:
        append(n.kern_log, banner())  # a fresh boot: earlier tests' lines are history
    yield fleet, kube, names, kubeconfigs, tmp
    remove_nodes(kube, list(names.values()))
    for n in fleet:
        for f, data in saved[n.index].items():
            if data is None:
                (n.state_dir / f).unlink(missing_ok=True)
            else:
                (n.state_dir / f).write_bytes(data)


@pytest.fixture
def agents(world):
    """``start(index, *args)`` runs node ``index``'s agent; everything is reset afterwards."""
    fleet, kube, names, kubeconfigs, tmp = world
    for n in fleet:
        (n.state_dir / "nvml.json").write_text(json.dumps(h100()))
    started: list[AgentProcess] = []

    def start(index: int, *args: str, log: str | None = None) -> AgentProcess:
        node = fleet.node(index)
        path = tmp / (log or f"{names[index]}-{uuid.uuid4().hex[:4]}.log")
        a = AgentProcess(
            names[index],
            kubeconfigs[index],
            path,
            kernel_log=node.kern_log,
            netns=node.netns,
            env=nvml_env(node.state_dir),
            args=["--interval", "1", "--timeout", "5", *args],
        )
        started.append(a.start())
        return a

    yield start
    for a in started:
        a.stop()
    for n in fleet:
        n.throttle(None)
        (n.state_dir / "nvml.json").write_text(json.dumps(h100()))
        append(n.kern_log, banner())  # repaired by a reboot: the next test starts clean
    for name in names.values():
        clear_taints(kube, name)
        set_annotations(kube, name, OURS)


def ready(a: AgentProcess, rounds: int = 1) -> None:
    wait_until(
        f"{rounds} round(s) of the agent",
        lambda: a.output().count(" round ") >= rounds and ": following (" in a.output(),
        90,
        0.05,
        a.tail,
    )


def gpu_strikes(kube, name: str) -> int | None:
    return (annotation(kube, name, keys.ANN_STRIKES) or {}).get("gpu")


def test_node2_gpu_turns_bad_and_three_strikes_taint_only_node2(world, agents):
    fleet, kube, names, _, _ = world
    running = {i: agents(i) for i in (1, 2, 3)}
    for a in running.values():
        ready(a)
    (fleet.node(2).state_dir / "nvml.json").write_text(json.dumps(BAD_GPU))
    seen: list[int | None] = []

    def tainted():
        node = get_node(kube, names[2])
        seen.append(
            json.loads(node["metadata"].get("annotations", {}).get(keys.ANN_STRIKES, "{}")).get(
                "gpu"
            )
        )
        return (
            node
            if any(t["key"] == "fleetmedic.io/repair" for t in node["spec"].get("taints") or [])
            else None
        )

    node = wait_until("node 2 tainted repair=reboot", tainted, 60, 0.1, running[2].tail)
    assert {1, 2} <= set(seen), seen  # it counted up, it did not jump
    # the taint and the round's results are one write
    results = json.loads(node["metadata"]["annotations"][keys.ANN_LAST_RESULTS])
    assert results["gpu"]["status"] == "problem" and "nvidia.ecc" in results["gpu"]["detail"]
    assert node["spec"]["taints"] == [
        {"key": "fleetmedic.io/repair", "value": "reboot", "effect": "NoSchedule"}
    ]
    log = wait_until(
        "the fence in the log",
        lambda: "3 consecutive GPU check failures" in running[2].output() and running[2].output(),
        10,
        0.05,
    )
    assert "strikes gpu 1/3" in log and "strikes gpu 2/3" in log
    assert "3 consecutive GPU check failures: nvidia.ecc" in log
    for i in (1, 3):  # the others had a round since node 2 was fenced
        ready(running[i], running[i].output().count(" round ") + 1)
    for i in (1, 3):
        assert taint_keys(kube, names[i]) == set(), running[i].tail()
        assert gpu_strikes(kube, names[i]) == 0
        assert annotation(kube, names[i], keys.ANN_LAST_RESULTS)["gpu"]["status"] == "ok"
    events = kube.request("GET", "/api/v1/namespaces/default/events")["items"]
    assert [e["reason"] for e in events if e["involvedObject"]["name"] == names[2]] == [
        "FleetmedicFenced"
    ]
    # under repair, GPU checks stop: the next rounds say "skipped"
    wait_until(
        "gpu skipped",
        lambda: (
            (annotation(kube, names[2], keys.ANN_LAST_RESULTS) or {}).get("gpu", {}).get("status")
            == "skipped"
        ),
        10,
        0.1,
        running[2].tail,
    )


def test_restart_between_strike_2_and_3_still_taints_at_strike_3(world, agents):
    fleet, kube, names, _, _ = world
    (fleet.node(2).state_dir / "nvml.json").write_text(json.dumps(BAD_GPU))
    first = agents(2, "--interval", "4")
    wait_until("strike 2", lambda: gpu_strikes(kube, names[2]) == 2, 90, 0.05, first.tail)
    assert first.stop() == 0
    assert gpu_strikes(kube, names[2]) == 2 and taint_keys(kube, names[2]) == set()
    second = agents(2, "--interval", "4")
    wait_until("the taint", lambda: REBOOT in taint_keys(kube, names[2]), 90, 0.1, second.tail)
    rounds = wait_until(
        "its round's log line",
        lambda: [ln for ln in second.output().splitlines() if " round " in ln],
        10,
        0.05,
    )
    assert "round 1: gpu problem" in rounds[0] and "fenced repair=reboot" in rounds[0], (
        second.tail()
    )


@pytest.fixture
def iperf3_server(world):
    fleet = world[0]
    if not shutil.which("iperf3"):
        pytest.fail("iperf3 is not installed (scripts/setup.d/40-fakes.apt)")
    with socket.socket() as s:
        s.bind((fleet.host_address, 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        ["iperf3", "-s", "-B", fleet.host_address, "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_until("iperf3 -s", lambda: _listening(fleet.host_address, port), 10)
    yield f"{fleet.host_address}:{port}"
    proc.terminate()
    proc.wait(10)


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def test_node3_throttled_gets_slow_network_and_loses_it_when_unthrottled(
    world, agents, iperf3_server
):
    fleet, kube, names, _, _ = world
    a = agents(3, "--peer", iperf3_server, "--min-mbps", "50", "--network-duration", "1")
    net = lambda: (annotation(kube, names[3], keys.ANN_LAST_RESULTS) or {}).get("network", {})  # noqa: E731
    wait_until("a network pass", lambda: net().get("status") == "ok", 90, 0.1, a.tail)
    fleet.node(3).throttle("5mbit")
    wait_until("slow-network", lambda: SLOW in taint_keys(kube, names[3]), 90, 0.2, a.tail)
    assert net()["status"] == "problem" and "below 50" in net()["detail"]
    assert REBOOT not in taint_keys(kube, names[3])
    fleet.node(3).throttle(None)
    wait_until(
        "slow-network removed", lambda: SLOW not in taint_keys(kube, names[3]), 60, 0.2, a.tail
    )
    log = wait_until(
        "the removal in the log",
        lambda: (
            "removed fleetmedic.io/slow-network: network check passed" in a.output() and a.output()
        ),
        10,
        0.05,
    )
    assert "tainted fleetmedic.io/slow-network: 3 consecutive network check failures" in log
    for i in (1, 2):
        assert taint_keys(kube, names[i]) == set()


def test_xid_79_in_node1_kernel_log_taints_node1_at_once(world, agents):
    fleet, kube, names, _, _ = world
    a = agents(1)
    ready(a)
    t0 = time.monotonic()
    append(fleet.node(1).kern_log, xid_line(bus=0x9A, uptime=4242.0))
    wait_until("node 1 tainted", lambda: REBOOT in taint_keys(kube, names[1]), 5, 0.01, a.tail)
    latency = time.monotonic() - t0
    print(f"\nnode 1: Xid 79 line -> taint visible in {latency * 1000:.0f} ms")
    assert latency < 1.0
    assert annotation(kube, names[1], keys.ANN_LAST_FINDING)["pci"] == "0000:9a:00"
    assert taint_keys(kube, names[2]) == taint_keys(kube, names[3]) == set()


def test_a_hung_check_is_unknown_within_its_timeout_and_keeps_the_strikes(world, agents):
    fleet, kube, names, kubeconfigs, tmp = world
    node = fleet.node(1)
    set_annotations(kube, names[1], {keys.ANN_STRIKES: '{"gpu":1,"network":0}'})

    def once(scenario: dict) -> tuple[float, dict]:
        (node.state_dir / "nvml.json").write_text(json.dumps(scenario))
        a = AgentProcess(
            names[1],
            kubeconfigs[1],
            tmp / f"once-{uuid.uuid4().hex[:4]}.log",
            kernel_log=node.kern_log,
            netns=node.netns,
            env=nvml_env(node.state_dir),
            args=["--once", "--timeout", "2"],
        )
        t0 = time.monotonic()
        out = subprocess.run(a.argv, env=a.env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return time.monotonic() - t0, json.loads(out.stdout)

    healthy, _ = once(h100())
    assert gpu_strikes(kube, names[1]) == 0  # a pass resets
    set_annotations(kube, names[1], {keys.ANN_STRIKES: '{"gpu":1,"network":0}'})
    hung, result = once({**h100(), "hang": "*"})  # every NVML call blocks forever
    print(f"\n--once healthy {healthy:.1f}s, with a hung driver {hung:.1f}s (timeout 2s)")
    assert hung - healthy < 2 + 2.0
    gpu = annotation(kube, names[1], keys.ANN_LAST_RESULTS)["gpu"]
    assert gpu["status"] == "unknown" and "did not return within 2s" in gpu["detail"]
    assert result["strikes"] == {"gpu": 1, "network": 0} and result["fenced"] is None
    assert gpu_strikes(kube, names[1]) == 1 and taint_keys(kube, names[1]) == set()
