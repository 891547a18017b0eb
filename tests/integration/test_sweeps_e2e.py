"""Diagnostic sweeps of idle nodes end to end (issue 20 part 4): a real API server with kwok
Nodes and kwok pods, nspawn nodes behind real sshd, playbooks/sweep.yml through
ansible-runner running the real `fleetmedic diag --level 2` on each node. The GPU side
is the only stand-in: the fake `dcgmi` and, on the AMD node, the fake `rvs`
(tests/fakes/diag) replay a published capture from each node's scenario file.

One 6-node fleet serves the module:

- six Nodes, kwok pods asking for a GPU on two: only the four idle ones are swept, never
  more than ``max_concurrent`` (2) at once; the controller is SIGKILLed while two sweeps
  run, and its successor takes both maintenance taints off and sweeps those nodes again;
  the NVIDIA node whose level-2 run fails enters the ladder (manual: SM Stress is
  hardware) with the diagnostics as its last finding, and so does the AMD node whose
  `rvs -r 2` fails GST; `fleetmedic status` shows each node's last sweep;
- a pod bound to a node after the sweep decided it was idle (a pod cache one event
  behind, as an informer can be): the node is released untouched, never diagnosed;
- `fleetmedic plan` shows the sweeps the next cycle would start, those under way, and a
  pool whose sweeps are held.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fleetmedic.adapters import kube as kube_adapter
from fleetmedic.controller.loop import Controller
from fleetmedic.model import config as config_model
from tests.harness import ctlenv, ctlwait
from tests.harness.ctlbench import pool_name
from tests.harness.ctlenv import ControllerProcess, annotation, state_of, wait_until
from tests.harness.fleet import FleetError, start_fleet

pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]

DATA = Path(__file__).parents[1] / "unit" / "checks" / "data"
DCGM = DATA / "dcgm"
MAINTENANCE = "fleetmedic.io/maintenance"
LAST_SWEEP = "fleetmedic.io/last-sweep"
GPU_POD = {"containers": [{"name": "main", "image": "registry.invalid/fleetmedic/pause:1",
                           "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}  # fmt: skip


def dcgmi(node, capture: str, exit_code: int = 0, hang: float = 0) -> None:
    """What the node's fake dcgmi prints next (the scenario file the fake reads)."""
    text = (DCGM / capture).read_text()
    scenario = {"output": text, "exit": exit_code, "hang": hang}
    (node.state_dir / "dcgmi.json").write_text(json.dumps(scenario))


def rvs(node, capture: str, exit_code: int = 0) -> None:
    """What the node's fake rvs prints next."""
    scenario = {"output": (DATA / "rvs" / capture).read_text(), "exit": exit_code}
    (node.state_dir / "rvs.json").write_text(json.dumps(scenario))


@pytest.fixture(scope="module")
def fleet():
    try:
        f = start_fleet(6, prefix="pytest", owned=True)
    except FleetError as exc:
        pytest.fail(f"test fleet: {exc}", pytrace=False)
    try:
        ctlenv.prepare_nodes(f)
        for node in f.nodes:
            dcgmi(node, "pass-3.1.0.txt", hang=3)  # long enough to see two sweeps overlap
        yield f
    finally:
        f.down()


class Watch:
    """Polls the pool's Nodes: which ever carried the maintenance taint, and the most that
    carried it at one instant."""

    def __init__(self, kube, pool: str) -> None:
        self.kube, self.pool = kube, pool
        self.ever: set[str] = set()
        self.most = 0
        self.now: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        path = f"/api/v1/nodes?labelSelector={ctlenv.POOL_LABEL}%3D{self.pool}"
        while not self._stop.wait(0.2):
            try:
                items = self.kube.request("GET", path)["items"]
            except Exception:  # a slow answer on a loaded machine: look again
                continue
            self.now = {
                n["metadata"]["name"]
                for n in items
                if any(t.get("key") == MAINTENANCE for t in n["spec"].get("taints") or [])
            }
            self.ever |= self.now
            self.most = max(self.most, len(self.now))


def sweep_config(kube, fleet, pool: str, workdir: Path, max_concurrent: int = 2) -> Path:
    return ctlenv.write_config(
        workdir,
        kube,
        fleet,
        pool,
        None,
        {
            "sweep": {"every": "1h", "max_concurrent": max_concurrent, "timeout": 120},
            "safety": {"max_concurrent": 4},
        },
    )


def test_only_idle_nodes_n_at_a_time_a_kill_leaves_no_taint_a_failure_enters_the_ladder(
    fleet, kube, tmp_path
):
    pool = pool_name("sw")
    names = list(ctlenv.register(kube, fleet, pool))
    busy, idle = names[:2], names[2:]
    for name in busy:
        kube.make_pods(name, spec=GPU_POD)
    failing, amd = names[5], names[4]
    dcgmi(fleet.nodes[5], "fail-sm-stress.json", exit_code=226)
    kube.request(
        "PATCH",
        f"/api/v1/nodes/{amd}",
        {"metadata": {"labels": {"fleetmedic.io/gpu-vendor": "amd"}}},
        content_type="application/merge-patch+json",
    )
    rvs(fleet.nodes[4], "gst-fail-assembled.txt", exit_code=1)
    cfg = sweep_config(kube, fleet, pool, tmp_path / "a")
    with Watch(kube, pool) as watch:
        first = ControllerProcess(cfg, tmp_path / "first.log").start()
        try:
            wait_until(lambda: len(watch.now) == 2, 90, "two sweeps under way", interval=0.2)
            interrupted = set(watch.now)
            first.kill9()
        finally:
            first.stop()
        assert all(annotation(kube, n, LAST_SWEEP) is None for n in interrupted)
        second = ControllerProcess(cfg, tmp_path / "second.log").start()
        try:
            wait_until(
                lambda: all(annotation(kube, n, LAST_SWEEP) for n in idle),
                180,
                "every idle node swept",
            )
            wait_until(lambda: not watch.now, 30, "no maintenance taint left")
            port = config_model.load(cfg).metrics.port
            assert ctlenv.scrape(port, 'fleetmedic_sweeps_total{result="interrupted"}') == 2
            status = json.loads(ctlenv.cli(cfg, "status", "--all", "--json").stdout)
            table = ctlenv.cli(cfg, "status", "--all").stdout
        finally:
            second.stop()
            print(f"--- second controller ---\n{second.tail(60)}")
    assert watch.most <= 2 and watch.ever == set(idle), (watch.most, watch.ever)
    for name in idle:
        swept = annotation(kube, name, LAST_SWEEP)
        assert (swept["result"], swept["level"]) == (
            "fail" if name in (failing, amd) else "pass",
            2,
        ), swept
    for name in busy:
        assert annotation(kube, name, LAST_SWEEP) is None
    # the failure went into the ladder with the diagnostics as evidence
    assert state_of(kube, failing) == "manual"
    finding = annotation(kube, failing, "fleetmedic.io/last-finding")
    assert finding["kind"] == "diag" and "SM Stress" in finding["summary"]
    assert finding["tests"][0]["name"] == "SM Stress" and finding["tests"][0]["gpus"] == [0]
    assert annotation(kube, failing, "fleetmedic.io/last-results")["diag"]["status"] == "problem"
    # the AMD node ran `rvs -r 2` (its label picks the vendor), and GST's miss is hardware
    assert state_of(kube, amd) == "manual"
    finding = annotation(kube, amd, "fleetmedic.io/last-finding")
    assert finding["kind"] == "diag" and finding["summary"].startswith("sweep level 2: diag.rvs")
    assert (
        "rvs -r 2 failed: gst-1215Tflops-4K4K8K-rand-fp8 (gst, GPU 0000:15:00.0)"
        in (finding["summary"])
    )
    # what the fake tools were asked for, not only our own record of it: level 2 on every
    # idle node (dcgmi; rvs on the AMD one), none on a busy one. A killed sweep may or may
    # not have reached the tool before the kill.
    for node, name in zip(fleet.nodes, names, strict=True):
        asked = [(c["tool"], c["level"]) for c in node.diag_calls()]
        if name in busy:
            assert asked == [], (name, asked)
            continue
        tool = "rvs" if name == amd else "dcgmi"
        assert asked and set(asked) == {(tool, 2)}, (name, asked)
        assert len(asked) in ((1, 2) if name in interrupted else (1,)), (name, asked)
    rows = {r["name"]: r for r in status}
    assert rows[idle[0]]["last_sweep"]["result"] == "pass" and rows[busy[0]]["last_sweep"] is None
    assert "LAST SWEEP" in table.splitlines()[0]


def test_a_pod_bound_after_the_decision_releases_the_node_untouched(fleet, kube, tmp_path):
    pool = pool_name("swb")
    [name] = ctlenv.register(kube, fleet, pool, nodes=[fleet.nodes[0]])
    asked_before = fleet.nodes[0].diag_calls()
    kube.make_pods(name, spec=GPU_POD)
    cfg = config_model.load(sweep_config(kube, fleet, pool, tmp_path / "b"))
    ctl = Controller(cfg, kube_adapter.connect(kube.kubeconfig))
    assert ctl.sweeper is not None
    busy = ctl.metrics.sweeps.labels(result="busy")
    cache = ctl.sweeper.pods
    real = cache.gpu_nodes
    # the decision reads a pod cache one event behind: the pod is bound, the cache does
    # not know it yet (until the sweep has found it out for itself)
    cache.gpu_nodes = lambda: real() - {name} if not busy._value.get() else real()  # type: ignore[method-assign]
    stop = threading.Event()
    thread = threading.Thread(target=ctl.run, args=(stop,), daemon=True)
    with Watch(kube, pool) as watch:
        thread.start()
        try:
            wait_until(lambda: busy._value.get() == 1, 60, "the sweep to find the pod")
            cycles = ctl.cycles

            def looked_twice() -> bool:
                ctlwait.poke(kube, name)  # a Node event wakes the loop (else it looks every 60 s)
                return ctl.cycles >= cycles + 2 and not watch.now

            wait_until(looked_twice, 60, "two more cycles", interval=1)
        finally:
            stop.set()
            thread.join(30)
    assert watch.ever <= {name}  # tainted for a moment at most, and released
    assert busy._value.get() == 1  # once: the cache knows the pod now, the node is skipped
    assert ctlenv.taints(kube, name) == []
    assert annotation(kube, name, LAST_SWEEP) is None
    assert fleet.nodes[0].diag_calls() == asked_before, "the busy node's GPUs were diagnosed"
    runs = tmp_path / "b" / "runs"
    assert not any("sweep" in p.name for p in runs.iterdir()) if runs.exists() else True


def test_plan_shows_the_sweeps_the_next_cycle_would_start(fleet, kube, tmp_path):
    """No controller runs: `plan` reads the Nodes and the GPU pods itself."""
    pool = pool_name("swp")
    busy, idle, recent, running = ctlenv.register(kube, fleet, pool, nodes=fleet.nodes[:4])
    kube.make_pods(busy, spec=GPU_POD)
    at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    merge = "application/merge-patch+json"
    swept = json.dumps({"at": at, "result": "pass", "level": 2})
    kube.request(
        "PATCH",
        f"/api/v1/nodes/{recent}",
        {"metadata": {"annotations": {LAST_SWEEP: swept}}},
        content_type=merge,
    )
    taint = {"key": MAINTENANCE, "value": "sweep", "effect": "NoSchedule"}
    kube.request(
        "PATCH", f"/api/v1/nodes/{running}", {"spec": {"taints": [taint]}}, content_type=merge
    )

    cfg = sweep_config(kube, fleet, pool, tmp_path / "p")
    items = json.loads(ctlenv.cli(cfg, "plan", "--json").stdout)
    sweeps = {i["node"]: i for i in items if i["action"] == "sweep"}
    # the busy node and the one swept a moment ago are not due; one sweep runs, one starts
    assert set(sweeps) == {idle, running}, items
    assert sweeps[idle]["verdict"] == "do" and sweeps[idle]["reason"] == "idle, never swept"
    assert sweeps[idle]["phase"] == "level 2" and sweeps[idle]["playbook"] == "sweep.yml"
    assert sweeps[running]["verdict"] == "running"
    text = ctlenv.cli(cfg, "plan").stdout
    assert f"{idle}: sweep level 2 (-): idle, never swept" in text
    assert "1 sweep(s) would start" in text.splitlines()[-1]

    # one sweep at a time: the running one leaves no room, and the pool says so
    cfg = sweep_config(kube, fleet, pool, tmp_path / "q", max_concurrent=1)
    items = json.loads(ctlenv.cli(cfg, "plan", "--json").stdout)
    held = [i for i in items if i["action"] == "sweep" and i["node"] is None]
    assert [(h["verdict"], h["held_because"]) for h in held] == [
        ("held", "no room in the sweep or repair budget")
    ]
    assert "sweeps of profile default: held: no room" in ctlenv.cli(cfg, "plan").stdout
