"""Issue 27's storm on the real API server, through the real agent (``fleetmedic agent
--once`` with the agent's real identity, RBAC and admission policies) and through the
Loki source (``fleetmedic watch loki --once`` against a real Loki):

- one crash-looping job's two hours of Xid 13 (forty places), 43+45, 31 (once per GPU),
  8 and 69 on a healthy 8-GPU node: no fence of ours;
- the same storm then an Xid 79: ``reboot``, also raising a ``reset`` or ``diagnose``
  fence the node already had (the admission policy lets the agent replace a repair
  taint only by a stronger one);
- Xid 13 three times at one GPC/TPC: ``diagnose``; Xid 31 twice on one GPU: ``diagnose``;
- issue 39's AMD storm: one job's two hours of amdgpu page faults (the same process under
  new pids and PASIDs, on the GPUs it uses) on a healthy MI300X node: no fence; a second
  process faulting on one of those GPUs: ``diagnose``; a fault right after a GPU reset:
  ``diagnose``.

Nothing here sleeps before asserting that nothing happened: each run is ``--once``, and
the test waits for the process to finish (its exit is the event that says every line
was handled).
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import pytest

from fleetmedic.model import keys
from tests.harness.agentenv import (
    AgentProcess,
    agent_kubeconfig,
    annotation,
    banner,
    install_agent_rbac,
    remove_nodes,
    taint_keys,
)
from tests.harness.ctlenv import FLEETMEDIC
from tests.harness.loki import kernel_labels
from tests.harness.storm import (
    AMD_GPUS,
    GPUS,
    TWO_HOURS,
    amd_fault,
    amd_reset,
    amd_storm,
    dmesg,
    storm,
    xid13,
    xid31,
    xid79,
)

pytestmark = [pytest.mark.kube]

REPAIR = "fleetmedic.io/repair="
FOREIGN = {"key": "example.com/team", "value": "a", "effect": "NoSchedule"}


def ours(kube, node: str) -> set[str]:
    return {t for t in taint_keys(kube, node) if t.startswith("fleetmedic.io/")}


def fence(kube, node: str, state: str) -> None:
    kube.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        {
            "spec": {
                "taints": [
                    FOREIGN,
                    {"key": "fleetmedic.io/repair", "value": state, "effect": "NoSchedule"},
                ]
            }
        },
        content_type="application/merge-patch+json",
    )


def xid13_at(t: float, gpc: int, tpc: int, bus: int = GPUS[5]) -> list[tuple[float, str]]:
    return [(t, line) for line in xid13(bus, gpc, tpc, sm=int(t) % 4)]


CASES = {
    # name: (events, fence before, fence after)
    "storm": (storm(), None, None),
    "storm+79": ([*storm(), (TWO_HOURS, xid79(GPUS[4]))], None, "reboot"),
    "reset+storm+79": ([*storm(), (TWO_HOURS, xid79(GPUS[4]))], "reset", "reboot"),
    "diagnose+storm+79": ([*storm(), (TWO_HOURS, xid79(GPUS[4]))], "diagnose", "reboot"),
    "xid13x3": (
        [*xid13_at(100, 7, 7), *xid13_at(2600, 7, 7), *xid13_at(6500, 7, 7)],
        None,
        "diagnose",
    ),
    "xid31x2": ([(300.0, xid31(GPUS[1])), (4000.0, xid31(GPUS[1]))], None, "diagnose"),
    "amd-storm": (amd_storm(), None, None),
    "amd-storm+other-process": (
        [*amd_storm(), *[(6000.0, ln) for ln in amd_fault(AMD_GPUS[1], 40001, 90001, "ollama")]],
        None,
        "diagnose",
    ),
    "amd-after-reset": (
        [
            *[(500.0, ln) for ln in amd_reset(AMD_GPUS[6])],
            *[(502.0, ln) for ln in amd_fault(AMD_GPUS[6], 32770, 4001)],
        ],
        None,
        "diagnose",
    ),
}
FENCED_BY = {  # the other fences are the Xid 79's
    "xid13x3": "xid.13",
    "xid31x2": "xid.31",
    "amd-storm+other-process": "amdgpu.page-fault",
    "amd-after-reset": "amdgpu.page-fault",
}


# -- the agent ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rbac(kube):
    install_agent_rbac(kube)
    return kube


@pytest.fixture
def node(rbac):
    name = f"storm-{uuid.uuid4().hex[:6]}"
    rbac.make_nodes([name], labels={keys.LABEL_VENDOR: "none"}, taints=[FOREIGN])
    yield name
    remove_nodes(rbac, [name])


def agent_once(kc, node: str, tmp_path, kern, boot, log: str) -> AgentProcess:
    """``fleetmedic agent --once``, run to its end (it read the whole log and wrote)."""
    a = AgentProcess(
        node,
        kc,
        tmp_path / log,
        kernel_log=kern,
        boot_id_file=boot,
        args=["--once", "--timeout", "5", "--vendor", "none"],
    ).start()
    assert a.proc is not None
    assert a.proc.wait(120) == 0, a.tail()
    return a


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_agent_judges_the_storm_by_context(rbac, node, tmp_path, case):
    kube = rbac
    events, before, after = CASES[case]
    if before:
        fence(kube, node, before)
    kern = tmp_path / "kern.log"
    kern.write_text(banner() + "".join(dmesg(sorted(events, key=lambda e: e[0]))))
    boot = tmp_path / "boot_id"
    boot.write_text(f"{uuid.uuid4()}\n")

    kc = agent_kubeconfig(kube, node, tmp_path / "kc")  # the agent's identity, bound to its Pod
    a = agent_once(kc, node, tmp_path, kern, boot, "agent.log")
    want = {REPAIR + after} if after else ({REPAIR + before} if before else set())
    assert ours(kube, node) == want, a.tail()
    assert "example.com/team=a" in taint_keys(kube, node)  # nobody else's taint touched
    if after and before:
        assert f"raised repair={before} to repair={after}" in a.output()
    counts = annotation(kube, node, keys.ANN_MONITOR_COUNTS)
    if case == "amd-storm":  # one place per GPU: the job's process, whatever its pids
        hist = counts["wf"]["h"]
        assert {k.split("|")[0] for k in hist} == {"amdgpu.page-fault"}
        assert all({p for _, p in v["e"]} == {"process=python3"} for v in hist.values())
    if case == "storm":
        hist = counts["wf"]["h"]
        assert sum(len(v["e"]) for k, v in hist.items() if k.startswith("xid.13|")) == 40
        assert sorted(k for k in hist if k.startswith("xid.31|")) == sorted(
            f"xid.31|0000:{b:02x}:00" for b in GPUS
        )
    if after:  # the fence's evidence names the finding that fenced, whatever its path
        mark = annotation(kube, node, keys.ANN_LAST_FINDING)
        assert (mark["rule"], mark["acted"]) == (FENCED_BY.get(case, "xid.79"), True), mark

    # a restart of the agent reads the same lines again: nothing changes
    node_before = kube.request("GET", f"/api/v1/nodes/{node}")
    agent_once(kc, node, tmp_path, kern, boot, "agent2.log")
    node_after = kube.request("GET", f"/api/v1/nodes/{node}")
    assert node_after["spec"].get("taints") == node_before["spec"].get("taints")
    ann_keys = (keys.ANN_MONITOR_COUNTS, keys.ANN_LAST_FINDING)
    assert [node_after["metadata"]["annotations"].get(k) for k in ann_keys] == [
        node_before["metadata"]["annotations"].get(k) for k in ann_keys
    ]


def test_the_admission_policy_lets_the_agent_raise_but_never_lower(rbac, node, tmp_path):
    from fleetmedic.adapters.kube import connect
    from fleetmedic.errors import PermanentError
    from fleetmedic.model import nodeedit
    from fleetmedic.model.vocabulary import preset

    vocab = preset()
    kube = rbac
    fence(kube, node, "reboot")
    api = connect(str(agent_kubeconfig(kube, node, tmp_path / "kc")))

    def swap(old, new):
        def edit(n):
            nodeedit.remove_taint(n, vocab.repair(old))
            return nodeedit.add_taint(n, vocab.repair(new))

        return edit

    deadline = time.monotonic() + 20
    while True:  # the policy takes effect once the API server has loaded it
        try:
            api.update_node(node, swap("reboot", "reset"))
        except PermanentError as exc:
            assert "may not remove a repair taint or lower it" in str(exc)
            break
        fence(kube, node, "reboot")  # written before the policy loaded
        assert time.monotonic() < deadline, "the admission policy never denied a lower fence"
        time.sleep(0.5)
    assert ours(kube, node) == {REPAIR + "reboot"}
    api.update_node(node, swap("reboot", "manual"))
    assert ours(kube, node) == {REPAIR + "manual"}
    with pytest.raises(PermanentError):
        api.update_node(node, lambda n: nodeedit.remove_taint(n, vocab.manual))


# -- the Loki source ----------------------------------------------------------------------
def watch_once(loki, kube, cursor) -> dict:
    r = subprocess.run(
        [
            str(FLEETMEDIC),
            "watch",
            "loki",
            "--endpoint",
            loki.url,
            "--cursor-file",
            str(cursor),
            "--kubeconfig",
            str(kube.kubeconfig),
            "--lookback",
            str(int(TWO_HOURS + 3600)),
            "--once",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_loki_source_judges_the_storm_by_context(loki_factory, kube, tmp_path):
    loki = loki_factory()
    run = uuid.uuid4().hex[:6]
    names = {case: f"lstorm-{run}-{i}" for i, case in enumerate(sorted(CASES))}
    kube.make_nodes(list(names.values()), labels={keys.LABEL_VENDOR: "nvidia"}, taints=[FOREIGN])
    try:
        start_ns = time.time_ns() - int((TWO_HOURS + 120) * 1e9)
        for case, name in names.items():
            events, before, _ = CASES[case]
            if before:
                fence(kube, name, before)
            values = [  # Promtail's journal scrape ships the message alone
                (start_ns + int(t * 1e9) + i, msg)
                for i, (t, msg) in enumerate(sorted(events, key=lambda e: e[0]))
            ]
            loki.push(kernel_labels("promtail", node=name), values)
        last = names[sorted(CASES)[-1]]
        loki.wait_for(f'{{node_name="{last}"}}', 2, start=start_ns)
        cursor = tmp_path / "cursor.json"
        got = watch_once(loki, kube, cursor)
        assert got["unattributed"] == 0, got
        for case, name in names.items():
            _, before, after = CASES[case]
            want = {REPAIR + after} if after else ({REPAIR + before} if before else set())
            assert ours(kube, name) == want, (case, got)
            assert "example.com/team=a" in taint_keys(kube, name)
            if after:  # the evidence names the finding that fenced, as the agent's does
                mark = annotation(kube, name, keys.ANN_LAST_FINDING)
                assert mark["rule"] == FENCED_BY.get(case, "xid.79"), (case, mark)
        assert watch_once(loki, kube, cursor)["lines"] == 0  # nothing read twice
    finally:
        kube.delete_nodes(list(names.values()))
