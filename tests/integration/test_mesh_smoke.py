"""The Receptor test mesh runs ansible-runner jobs the way AWX does (transmit, a work
unit on an execution node running ``ansible-runner worker``, process), each execution
node reaching only its own share of the fleet (tests/harness/mesh.py)."""

from __future__ import annotations

import io
import json
import re
import subprocess
import time
from pathlib import Path

import ansible_runner
import pytest
import yaml

from tests.harness.loadscale import Deadline

pytestmark = [pytest.mark.slow]

PLAYBOOK = """\
- name: Read the boot id
  hosts: all
  gather_facts: false
  tasks:
    - name: Boot id
      ansible.builtin.command: cat /proc/sys/kernel/random/boot_id
      register: boot
      changed_when: false
"""


def _job_dir(tmp: Path, fleet, hosts: list[str]) -> Path:
    """A private data dir for ``hosts`` of the fleet: the fleet's inventory minus its
    ControlPath dir (the node's own home is used instead: a master connection made from
    the host's namespace must not carry the job past the node's firewall)."""
    pdd = tmp / "job"
    (pdd / "project").mkdir(parents=True)
    (pdd / "inventory").mkdir()
    (pdd / "project" / "boot_id.yml").write_text(PLAYBOOK)
    inv = yaml.safe_load(fleet.inventory.read_text())
    inv["all"]["vars"].pop("ansible_control_path_dir", None)
    inv["all"]["hosts"] = {h: v for h, v in inv["all"]["hosts"].items() if h in hosts}
    (pdd / "inventory" / "hosts.yml").write_text(yaml.safe_dump(inv))
    return pdd


def _transmit(mesh, pdd: Path) -> bytes:
    p = subprocess.run(
        [str(mesh.bin.ansible_runner), "transmit", str(pdd), "-p", "boot_id.yml"],
        capture_output=True,
        check=True,
        timeout=60,
    )
    return p.stdout


def _submit(mesh, node: str, job: Path) -> str:
    out = mesh.receptorctl(
        "work",
        "submit",
        mesh.work_type,
        "--node",
        node,
        "--tls-client",
        mesh.tls_client,
        "--signwork",
        "--payload",
        str(job),
    ).stdout.decode()
    m = re.search(r"Unit ID: (\S+)", out)
    assert m, out
    return m.group(1)


def _wait_done(mesh, unit: str, timeout: float = 120) -> dict:
    """The unit's status (``work list``) once it is no longer pending or running, within
    ``timeout`` seconds of an idle machine, stretched by the load (a 3-worker run on 2
    CPUs once left a unit "Starting Worker" past a fixed 120 s)."""
    deadline = Deadline(timeout)
    while True:
        st = json.loads(mesh.receptorctl("work", "list", "--unit_id", unit).stdout)[unit]
        if st["StateName"] not in ("Pending", "Running"):
            return st
        assert not deadline.passed(), f"unit {unit} not done after {deadline}: {st}"
        time.sleep(0.2)


def _wait_released(mesh, unit: str, timeout: float = 30) -> None:
    """The unit gone from the controller's list. Receptor releases a remote unit that
    started in the background: ``work release`` sends the release to the execution node
    and returns, and a goroutine drops the local unit once the remote one is gone
    (remoteUnit.cancelOrRelease and runAndMonitor, pkg/workceptor/remote_work.go, 1.4.4).
    A CI run at load 7 listed the unit right after the command returned."""
    deadline = Deadline(timeout)
    while unit in mesh.work_units():
        assert not deadline.passed(), f"unit {unit} still listed {deadline} after its release"
        time.sleep(0.1)


def _run_through_mesh(mesh, fleet, tmp_path: Path, exec_id: str, hosts: list[str]):
    pdd = _job_dir(tmp_path, fleet, hosts)
    job = tmp_path / "job.stream"
    job.write_bytes(_transmit(mesh, pdd))
    unit = _submit(mesh, exec_id, job)
    status = _wait_done(mesh, unit)
    # A worker that exits non-zero (the playbook's rc) fails the unit, and receptorctl
    # then exits 1 after streaming every result: the stream is still complete.
    results = mesh.receptorctl("work", "results", unit, check=False).stdout
    return unit, status, _process(results, tmp_path / "processed")


class Processed:
    """What ``ansible-runner process`` made of a worker's stream: the final status,
    the rc and events from the artifacts dir, and the stats of the playbook."""

    def __init__(self, status: dict, rc: int | None, events: list[dict]) -> None:
        self.status, self.rc = status.get("status"), rc
        self.events = events
        stats = [e for e in events if e["event"] == "playbook_on_stats"]
        self.stats = stats[-1]["event_data"] if stats else None


def _process(stream: bytes, pdd: Path) -> Processed:
    final: dict = {}
    ansible_runner.interface.run(
        streamer="process",
        private_data_dir=str(pdd),
        _input=io.BytesIO(stream),
        quiet=True,
        status_handler=lambda data, runner_config: final.update(data),
    )
    # The final status message carries no rc (ansible-runner 2.4): it is in the
    # artifacts the worker streamed back, as for a local run.
    rc_file = pdd / "artifacts" / "rc"
    rc = int(rc_file.read_text()) if rc_file.exists() else None
    files = sorted(pdd.glob("artifacts/job_events/*.json"))
    events = sorted((json.loads(f.read_text()) for f in files), key=lambda e: e["counter"])
    return Processed(final, rc, events)


def test_each_execution_node_reaches_only_its_share(mesh, fleet):
    st = mesh.status()
    assert {"exec-1", "exec-2"} <= set(st["RoutingTable"])
    assert mesh.routes == {"node-1": "exec-1", "node-2": "exec-2", "node-3": "exec-2"}
    one, two = mesh.node("exec-1"), mesh.node("exec-2")
    n1, n2, n3 = (fleet.node(i).address for i in (1, 2, 3))
    assert one.can_connect(n1, 22)
    assert not one.can_connect(n2, 22) and not one.can_connect(n3, 22)
    assert two.can_connect(n2, 22) and two.can_connect(n3, 22)
    assert not two.can_connect(n1, 22)
    # Nothing of the mesh on the host's own services beyond the bridge, no route out.
    assert one.run(["ip", "route", "show", "default"]).stdout.strip() == ""


def test_runner_job_through_the_mesh(mesh, fleet, tmp_path):
    unit, status, r = _run_through_mesh(mesh, fleet, tmp_path, "exec-1", ["node-1"])
    assert status["StateName"] == "Succeeded", status
    assert r.status == "successful" and r.rc == 0
    assert r.stats["ok"] == {"node-1": 1}
    assert not r.stats["failures"] and not r.stats["dark"]
    ok = [e for e in r.events if e["event"] == "runner_on_ok"]
    assert [e["event_data"]["host"] for e in ok] == ["node-1"]
    # The task really ran on node-1: its boot id, as read over SSH from the host.
    assert ok[0]["event_data"]["res"]["stdout"] == fleet.node(1).boot_id()

    # Released: no unit left in the controller's or the execution node's list, no unit
    # directory on disk, and the worker removed its private data dir.
    mesh.receptorctl("work", "release", unit)
    _wait_released(mesh, unit)
    assert mesh.node("exec-1").work_units() == {}
    assert mesh.unit_dirs() == {"controller": [], "exec-1": [], "exec-2": []}
    assert list((mesh.node("exec-1").dir / "tmp").iterdir()) == []


def test_job_for_a_node_outside_the_share_is_unreachable(mesh, fleet, tmp_path):
    unit, status, r = _run_through_mesh(mesh, fleet, tmp_path, "exec-1", ["node-2"])
    # The worker ran and exited with ansible's rc 4: Receptor calls the unit failed.
    assert status["StateName"] == "Failed" and "exit status 4" in status["Detail"], status
    assert r.status == "failed" and r.rc == 4
    assert r.stats["dark"] == {"node-2": 1}
    mesh.receptorctl("work", "release", unit)


def _wait_route(mesh, node: str, present: bool, timeout: float = 60) -> None:
    deadline = Deadline(timeout)  # (stretched by the load, as _wait_done)
    while (node in (mesh.status().get("RoutingTable") or {})) != present:
        assert not deadline.passed(), f"route to {node} still {not present} after {deadline}"
        time.sleep(0.2)


def test_faults_the_harness_injects(mesh, fleet):
    """The primitives issue 17's fault tests build on: a killed execution node drops out
    of the mesh and rejoins on start; a cut link drops it (no FIN, only silence) while
    its share stays reachable from it; healing brings it back."""
    one = mesh.node("exec-1")
    one.kill()
    _wait_route(mesh, "exec-1", present=False)
    assert "exec-2" in mesh.status()["RoutingTable"]
    one.start()
    mesh.wait_connected(["exec-1"])
    assert one.starts == 2

    one.cut_mesh()
    _wait_route(mesh, "exec-1", present=False)
    assert one.can_connect(fleet.node(1).address, 22)
    one.heal_mesh()
    mesh.wait_connected(["exec-1"], timeout=60)
