"""controller/migop.py on the real API server, as the controller's ServiceAccount with the
shipped RBAC (deploy/controller: no grant was added for this), against the mig-manager
stand-in (tests/harness/partition_operator.py, the one stand-in: it drives the fleet node's
fake mig-parted over SSH). Each point where a controller can be killed during the hand-off
is set up exactly, so each resume is checked deterministically: the e2e test
(test_partition_operator_e2e.py) kills a real controller wherever the kill happens to land.
"""

from __future__ import annotations

import json
import threading

import pytest

from fleetmedic.adapters.kube import connect
from fleetmedic.controller import migop
from fleetmedic.model import keys
from fleetmedic.model.config.partition import MIG_MANAGER, RestoreConfig
from fleetmedic.model.nodestate import NodeView
from fleetmedic.policy.actions import Action, Kind
from tests.harness import ctlenv, partitions
from tests.harness.ctlbench import pool_name
from tests.harness.ctlrbac import NAMESPACE, SA, install_controller_rbac
from tests.harness.partition_operator import CONFIG_LABEL, STATE_LABEL, MigManagerStandIn

pytestmark = [pytest.mark.fleet, pytest.mark.kube]

LAYOUT = "all-3g.40gb"
CONFIGS = {LAYOUT: [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]}
RECORD = {
    "ep": 1,
    "at": "2026-11-26T00:00:00Z",
    "summary": "GPU 0: MIG 3g.40gb x2; GPU 1: MIG 3g.40gb x2",
    "layout": {"vendor": "nvidia", "partitioned": True, "gpus": []},
    "labels": {CONFIG_LABEL: LAYOUT},
}


class Gone(Exception):
    """What the executor's Cancelled is to migop.restore."""


@pytest.fixture
def setup(kube, fleet_factory):
    install_controller_rbac(kube)
    ctl = connect(kube.kubeconfig_for_serviceaccount(NAMESPACE, SA))
    fleet = fleet_factory(1)
    node = fleet.node(1)
    pool = pool_name("pr")
    name = f"{pool}-1"
    kube.make_nodes(
        [name],
        labels={ctlenv.POOL_LABEL: pool, CONFIG_LABEL: LAYOUT, STATE_LABEL: "success"},
        annotations={keys.ANN_PARTITION: json.dumps(RECORD)},
        addresses=[node.address],
    )
    agents = []

    def agent(mode="apply"):
        partitions.mig(node)  # the layout the operator made before the fault
        a = MigManagerStandIn(kube, name, node, f"gpu-op-{pool}", CONFIGS, mode).start()
        agents.append(a)
        return a

    yield ctl, name, node, agent
    for a in agents:
        a.stop()
        assert not a.errors, a.errors
        print(f"--- stand-in: pods {a.pods}, runs {a.runs}, errors {a.errors[-3:]}")
    kube.delete_nodes([name])


def view_of(kube, name) -> NodeView:
    meta = ctlenv.node(kube, name)["metadata"]
    return NodeView(
        name=name,
        state="reboot",
        slow_network=False,
        vendor="nvidia",
        address=None,
        unschedulable=True,
        foreign_signals=(),
        foreign=(),
        labels=meta.get("labels") or {},
        annotations=meta.get("annotations") or {},
        taints=(),
        resource_version=meta["resourceVersion"],
    )


def restore(ctl, kube, name, agent, rid, wait=120, cancel=None):
    op = MIG_MANAGER.model_copy(update={"namespace": agent.namespace})
    cfg = RestoreConfig(operators=(op,), operator_wait=wait)
    action = Action(
        Kind.RUN,
        name,
        "restore",
        step="reboot",
        phase="restore",
        ep=1,
        hostvars={"fleetmedic_request_id": rid},
    )
    return migop.restore(ctl, view_of(kube, name), action, cfg, cancel or threading.Event(), Gone)


def record(kube, name) -> dict:
    return ctlenv.annotation(kube, name, keys.ANN_PARTITION)


def lose_layout(node):
    partitions.mig(node, gis=[])  # MIG on, no instances: what a reset leaves on an A100


def test_a_hand_off_restarts_the_agent_once_and_a_rerun_never_again(kube, setup):
    ctl, name, node, agent = setup
    a = agent()
    first = a.pods[-1]
    lose_layout(node)
    done = restore(ctl, kube, name, a, "e1-reboot1-x")
    assert done.failed is None, done.failed
    assert done.hostvars == {migop.HOSTVAR: "mig-manager"}
    assert len(a.pods) == 2 and a.runs[-1] == (LAYOUT, "success")
    assert len(partitions.mig_devices(node)) == 4
    assert partitions.mig_parted_applies(node) == [True]
    rec = record(kube, name)
    assert rec["handoff"]["rid"] == "e1-reboot1-x" and rec["handoff"]["pod"] == first
    assert rec["layout"] == RECORD["layout"], "the record itself is unchanged"
    # a controller killed after the operator succeeded runs the phase again: no trigger
    again = restore(ctl, kube, name, a, "e1-reboot1-x")
    assert again.failed is None
    assert len(a.pods) == 2, f"the agent's pod was restarted twice: {a.pods}"
    assert partitions.mig_parted_applies(node) == [True]


def test_killed_between_the_record_and_the_eviction_the_next_run_evicts_that_pod(kube, setup):
    ctl, name, node, agent = setup
    a = agent()
    pod = a.pods[-1]
    lose_layout(node)
    # step 1 done (trigger recorded, stale state off), step 2 not: the controller died there
    trigger = {"rid": "e1-reboot1-y", "pod": pod, "name": "p", "at": "2026-11-26T00:00:00Z"}
    kube.request(
        "PATCH",
        f"/api/v1/nodes/{name}",
        {
            "metadata": {
                "labels": {STATE_LABEL: None},
                "annotations": {keys.ANN_PARTITION: json.dumps({**RECORD, "handoff": trigger})},
            }
        },
        content_type="application/merge-patch+json",
    )
    # the trigger's time is long past: a restarted controller keeps counting from it, so give
    # this one a wait that still covers today
    done = restore(ctl, kube, name, a, "e1-reboot1-y", wait=10 * 365 * 86400)
    assert done.failed is None, done.failed
    assert len(a.pods) == 2, a.pods
    assert partitions.mig_parted_applies(node) == [True]


def test_an_operator_failure_is_one_line(kube, setup):
    ctl, name, node, agent = setup
    a = agent()
    lose_layout(node)
    partitions.set_scenario_key(node, "fail", {"nvidia-mig-parted apply": "GPU 0: refused"})
    done = restore(ctl, kube, name, a, "e1-reboot1-z")
    assert done.failed is not None
    assert done.failed.message == (
        f"mig-manager reported {STATE_LABEL}=failed applying {CONFIG_LABEL}={LAYOUT}"
    )


def test_no_agent_pod_on_the_node_fails_at_once_without_a_write(kube, setup):
    ctl, name, node, _agent = setup
    a = MigManagerStandIn(kube, name, node, "gpu-op-nowhere", CONFIGS)  # never started
    done = restore(ctl, kube, name, a, "e1-reboot1-w")
    assert done.failed is not None
    assert done.failed.message.startswith(
        "no mig-manager pod on the node (namespace gpu-op-nowhere, labels app=nvidia-mig-manager)"
    )
    assert "handoff" not in record(kube, name)
    labels = ctlenv.node(kube, name)["metadata"]["labels"]
    assert labels[STATE_LABEL] == "success", "nothing was changed"


def test_a_shutdown_while_waiting_is_the_executors_cancel(kube, setup):
    ctl, name, _node, agent = setup
    a = agent("silent")
    cancel = threading.Event()
    threading.Timer(3, cancel.set).start()
    with pytest.raises(Gone):
        restore(ctl, kube, name, a, "e1-reboot1-v", cancel=cancel)
    assert record(kube, name)["handoff"]["rid"] == "e1-reboot1-v"


def test_without_the_grants_the_rung_fails_in_one_line(kube, setup):
    _ctl, name, _node, agent = setup
    a = agent()
    bare = connect(kube.kubeconfig_for_serviceaccount(NAMESPACE, "fleetmedic-no-grants"))
    done = restore(bare, kube, name, a, "e1-reboot1-u")
    assert done.failed is not None
    assert done.failed.message.startswith("mig-manager restore not allowed: "), done.failed
    assert "deploy/controller/rbac.yaml" in done.failed.message
    assert len(a.pods) == 1, "nothing was restarted"
