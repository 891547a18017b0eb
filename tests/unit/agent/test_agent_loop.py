"""Agent: rounds on an in-memory Node (no GPU vendor, no peers), resilience of the loop."""

from __future__ import annotations

import threading

from agent_helpers import MemoryKube

from fleetmedic.agent.config import AgentConfig, KernelWatchConfig
from fleetmedic.agent.loop import Agent
from fleetmedic.checks import CheckConfig
from fleetmedic.checks.config import FabricConfig
from fleetmedic.errors import TemporaryError
from fleetmedic.model import keys
from fleetmedic.model.vocabulary import preset

CFG = AgentConfig(
    node_name="n1",
    interval=0.05,
    retry_cap=0.2,
    kernel=KernelWatchConfig(source="none"),
    # no GPU vendor, and no RDMA ports read from this machine's own /sys
    checks=CheckConfig(vendor="none", timeout=1, fabric=FabricConfig(enabled=False)),
)


def test_a_round_records_results_and_skips_gpu_under_repair():
    kube = MemoryKube()
    agent = Agent(CFG, kube)
    out = agent.round()
    assert out is not None and agent.rounds == 1 and kube.ann(keys.ANN_LAST_RESULTS) == {}
    kube.node["spec"]["taints"].append(preset().reimage.as_taint())
    out = agent.round()
    assert out.before_repair == "reimage"
    assert kube.ann(keys.ANN_LAST_RESULTS)["gpu"] == {
        "status": "skipped",
        "detail": "node under repair (reimage)",
        "since": kube.ann(keys.ANN_LAST_RESULTS)["gpu"]["since"],
    }


def test_the_loop_survives_a_bug_in_a_round_and_stops_on_request():
    kube = MemoryKube()
    calls = {"n": 0}
    real = kube.get_node

    def flaky(name):
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyError("resourceVersion")  # a bug of ours, not an API error
        return real(name)

    kube.get_node = flaky
    agent = Agent(CFG, kube)
    thread = threading.Thread(target=agent.run)
    thread.start()
    while agent.rounds < 2 and thread.is_alive():
        agent.stop.wait(0.01)
    agent.stop.set()
    thread.join(5)
    assert not thread.is_alive() and agent.rounds >= 2


def test_once_gives_up_when_the_api_server_does_not_answer():
    kube = MemoryKube()

    def down(name):
        raise TemporaryError(
            "get node n1: API server https://x unreachable: MaxRetryError", delay=0.01
        )

    kube.get_node = down
    assert Agent(CFG, kube).run_once() is None


def test_the_heartbeat_is_touched_by_rounds_and_while_waiting_out_an_outage(tmp_path):
    """The liveness probe's file: a round touches it, and so does every retry while the
    API server is down (waiting is not hanging); an unwritable path is logged, not fatal."""
    import dataclasses
    import os

    alive = tmp_path / "alive"
    kube = MemoryKube()
    agent = Agent(dataclasses.replace(CFG, alive_file=str(alive)), kube)
    agent.run_once()
    assert alive.exists()
    os.utime(alive, (0, 0))
    attempts = {"n": 0}

    def down(name):
        attempts["n"] += 1
        raise TemporaryError("get node n1: API server unreachable", delay=0.01)

    kube.get_node = down
    assert agent.run_once() is None  # gave up after retry_cap
    assert attempts["n"] >= 2 and alive.stat().st_mtime > 0
    broken = Agent(dataclasses.replace(CFG, alive_file=str(tmp_path / "no" / "dir")), MemoryKube())
    broken.beat()
    broken.beat()
    assert broken._beat_failed
