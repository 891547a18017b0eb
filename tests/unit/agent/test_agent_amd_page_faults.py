"""Issue 39 item 4 in the agent (in-memory Node; the same flows against the real API
server and Loki in tests/integration/test_storm.py): amdgpu page faults are judged by
their context, as NVIDIA's WORKFLOW_XID_31 judges Xid 31, never counted.

- one job's storm (the same process, restarting under new pids and PASIDs, on the GPUs it
  uses) fences nothing, and a restart of the agent changes nothing;
- a second process faulting on the same GPU fences ``diagnose``;
- a fault right after the driver reset that GPU fences ``diagnose``;
- a fault at VMID 0 (the kernel's own context) fences ``diagnose`` from the line alone.
"""

from __future__ import annotations

from agent_helpers import Node

from fleetmedic.model import keys
from tests.harness.storm import AMD_GPUS, amd_fault, amd_reset, amd_storm, dmesg

DIAGNOSE = "fleetmedic.io/repair=diagnose"


def ours(node: Node) -> set[str]:
    return {t for t in node.kube.taints() if t.startswith("fleetmedic.io/")}


def write(node: Node, events: list[tuple[float, str]]) -> None:
    with open(node.log, "a") as f:
        f.writelines(dmesg(sorted(events, key=lambda e: e[0])))


def at(t: float, lines: list[str]) -> list[tuple[float, str]]:
    return [(t, line) for line in lines]


def test_one_jobs_page_fault_storm_fences_nothing_and_a_restart_changes_nothing(tmp_path):
    node = Node(tmp_path)
    write(node, amd_storm())
    node.run_once()
    assert ours(node) == set()
    wf = node.kube.ann(keys.ANN_MONITOR_COUNTS)["wf"]["h"]
    keys_seen = {k for k in wf if k.startswith("amdgpu.page-fault|")}
    assert keys_seen == {f"amdgpu.page-fault|0000:{b:02x}:00" for b in AMD_GPUS}
    for entry in wf.values():  # one place per GPU: the job's process, whatever its pid
        assert {p for _, p in entry["e"]} == {"process=python3"}
    writes = node.kube.writes
    node.run_once()  # a restart reads the same two hours again
    assert ours(node) == set() and node.kube.writes == writes


def test_a_second_process_faulting_on_the_same_gpu_calls_for_diagnostics(tmp_path):
    node = Node(tmp_path)
    bus = AMD_GPUS[2]
    write(
        node, at(100, amd_fault(bus, 32770, 4001)) + at(900, amd_fault(bus, 32790, 5002, "ollama"))
    )
    kw = node.run_once()
    assert ours(node) == {DIAGNOSE} and kw.acted == 1
    mark = node.kube.ann(keys.ANN_LAST_FINDING)
    assert (mark["rule"], mark["acted"]) == ("amdgpu.page-fault", True)
    (event,) = node.kube.events
    assert "WORKFLOW_AMD_PAGE_FAULT" in event[2] and "ollama" in event[2]
    writes = node.kube.writes
    node.run_once()
    assert node.kube.writes == writes


def test_the_same_process_on_two_gpus_is_still_the_application(tmp_path):
    node = Node(tmp_path)
    write(
        node,
        at(100, amd_fault(AMD_GPUS[0], 32770, 4001)) + at(900, amd_fault(AMD_GPUS[1], 32771, 4001)),
    )
    node.run_once()
    assert ours(node) == set()


def test_a_fault_right_after_a_gpu_reset_is_the_hardware(tmp_path):
    node = Node(tmp_path)
    bus = AMD_GPUS[3]
    write(node, at(200, amd_reset(bus)) + at(202, amd_fault(bus, 32770, 4001)))
    node.run_once()
    assert ours(node) == {DIAGNOSE}
    assert "after amdgpu.gpu-reset" in node.kube.events[0][2]


def test_a_fault_long_after_a_reset_or_on_another_gpu_is_not(tmp_path):
    node = Node(tmp_path)
    write(
        node,
        at(200, amd_reset(AMD_GPUS[3]))
        + at(202, amd_fault(AMD_GPUS[4], 32770, 4001))  # another GPU
        + at(900, amd_fault(AMD_GPUS[3], 32771, 4001)),  # 700 s later
    )
    node.run_once()
    assert ours(node) == set()


def test_a_fault_in_the_kernels_own_context_fences_from_the_line(tmp_path):
    node = Node(tmp_path)
    write(node, at(300, amd_fault(AMD_GPUS[5], 0, 0, "", vmid=0)))
    node.run_once()
    assert ours(node) == {DIAGNOSE}
    assert node.kube.ann(keys.ANN_LAST_FINDING)["rule"] == "amdgpu.page-fault-kernel"
