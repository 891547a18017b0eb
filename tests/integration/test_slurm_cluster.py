"""The controller's cluster interface on Slurm (adapters/slurmcluster.py) against a real
slurmctld and slurmd (tests/harness/slurm.py): node documents, the polling watch the
informer runs on, the controller's writes (fence, raise, lower, resume with the record in
the same update), foreign drains, derived labels, and Events as lines. The release
contract (the whole read the controller's loop runs on, its writes, the product's check
that slurmctld saved a record): every test here runs on every Slurm release, 26.05 too
(slurm_contract, tests/harness/slurm_fixtures.py)."""

from __future__ import annotations

import itertools
import json
import threading
import time

import pytest

from fleetmedic.adapters.filestore import FileStore
from fleetmedic.adapters.slurm import ForeignDrain, Slurm
from fleetmedic.adapters.slurmcluster import OWNER_LABEL, PARTITION_LABEL, SlurmCluster
from fleetmedic.errors import NotFoundError, PermanentError, TemporaryError
from fleetmedic.model import keys, nodeedit
from fleetmedic.model.config import Config
from fleetmedic.model.nodestate import view
from tests.harness.ctlenv import wait_until

pytestmark = [pytest.mark.slurm_contract]
VOCAB = Config().vocabulary()
NHC = "NHC: check_hw_eth failed"


@pytest.fixture
def cluster(slurm, tmp_path):
    yield SlurmCluster(
        Slurm(slurm.env["SLURM_CONF"]),
        VOCAB,
        FileStore(tmp_path / "store"),
        partitions=("gpu",),
        poll_interval=0.5,
        events=tmp_path / "events.jsonl",
    )
    slurm.reset_nodes()


def fence(node: dict, rung: str, **annotations: str | None) -> bool:
    for state in ("reboot", "reimage", "manual"):
        if state != rung:
            nodeedit.remove_taint(node, VOCAB.repair(state))
    nodeedit.add_taint(node, VOCAB.repair(rung))
    for k, v in annotations.items():
        nodeedit.set_annotation(node, k, v)
    return True


def unfence(node: dict, **annotations: str | None) -> bool:
    for state in ("reboot", "reimage", "manual"):
        nodeedit.remove_taint(node, VOCAB.repair(state))
    for k, v in annotations.items():
        nodeedit.set_annotation(node, k, v)
    return True


def test_documents_show_what_the_loop_reads(slurm, cluster):
    slurm.run("scontrol", "update", "nodename=n2", "state=drain", f"reason={NHC}")
    features = ("availablefeatures", "activefeatures")
    slurm.run("scontrol", "update", "nodename=n3", *(f"{f}=mi300x,ib" for f in features))
    try:
        nodes, _ = cluster.list_nodes()
    finally:
        slurm.run("scontrol", "update", "nodename=n3", *(f"{f}=" for f in features))
    assert [n["metadata"]["name"] for n in nodes] == ["n1", "n2", "n3"]
    n1, n2, n3 = nodes
    assert n1["metadata"]["labels"] == {
        f"{PARTITION_LABEL}gpu": "true",
        keys.LABEL_STATE: "healthy",
        keys.LABEL_SCHEDULER_RETURNS: "true",  # the harness's ReturnToService=2
    }
    # the GPU vendor from the node's features (the GRES here has no type)
    assert n3["metadata"]["labels"][keys.LABEL_VENDOR] == "amd"
    assert view(n3, VOCAB).vendor == "amd" and view(n1, VOCAB).vendor == "unknown"
    assert n1["status"]["addresses"] == [
        {"type": "InternalIP", "address": slurm.node_address("n1")}
    ]
    assert n1["spec"]["taints"] == [] and int(n1["metadata"]["resourceVersion"]) > 0
    # someone else's drain: no repair taint of ours, shown under its owner, not in the ladder
    assert n2["spec"]["taints"] == []
    assert n2["metadata"]["labels"][OWNER_LABEL] == "foreign_nhc"
    v = view(n2, VOCAB)
    assert v.state == "healthy" and v.address == slurm.node_address("n2")


def test_the_controllers_writes_map_to_one_update_each(slurm, cluster):
    ann = {keys.ANN_IN_FLIGHT: '{"phase":"reboot"}', keys.ANN_LAST_FINDING: None}
    written = cluster.update_node("n1", lambda n: fence(n, "reboot", **ann))
    assert view(written, VOCAB).state == "reboot"
    info = slurm.nodes()["n1"]
    assert info["reason"].startswith("fleetmedic: reboot: ") and "DRAIN" in info["state_flags"]
    assert json.loads(info["extra"])["fleetmedic"][keys.ANN_IN_FLIGHT] == '{"phase":"reboot"}'
    # the state label mirror follows the taint, and the document reads back the same
    back = cluster.get_node("n1")
    assert back["metadata"]["labels"][keys.LABEL_STATE] == "reboot"
    assert back["spec"] == written["spec"]
    assert back["metadata"]["annotations"] == written["metadata"]["annotations"]

    cluster.update_node("n1", lambda n: fence(n, "reimage"))
    assert slurm.nodes()["n1"]["reason"].startswith("fleetmedic: reimage: ")
    # a lower rung (a person's release to reboot) rewrites our reason too
    cluster.update_node("n1", lambda n: fence(n, "reboot"))
    assert slurm.nodes()["n1"]["reason"].startswith("fleetmedic: reboot: ")

    # resume: the drain goes and the record is written by the same update
    done = cluster.update_node("n1", lambda n: unfence(n, **{keys.ANN_IN_FLIGHT: None}))
    assert view(done, VOCAB).state == "healthy"
    info = slurm.nodes()["n1"]
    assert "DRAIN" not in info["state_flags"] and info["reason"] == ""
    assert keys.ANN_IN_FLIGHT not in (json.loads(info["extra"] or "{}").get("fleetmedic") or {})


def test_foreign_drains_and_derived_labels_refuse_every_write(slurm, cluster):
    slurm.run("scontrol", "update", "nodename=n2", "state=drain", f"reason={NHC}")
    with pytest.raises(ForeignDrain, match="drained by someone else"):
        cluster.update_node("n2", lambda n: fence(n, "reboot"))
    with pytest.raises(ForeignDrain):
        cluster.update_node("n2", lambda n: nodeedit.set_annotation(n, keys.ANN_STATE_SINCE, "x"))
    info = slurm.nodes()["n2"]
    assert info["reason"] == NHC and info["extra"] == "", "theirs: untouched"
    # our reason edited by a person: theirs from then on, never resumed by us
    cluster.update_node("n3", lambda n: fence(n, "reboot"))
    slurm.run("scontrol", "update", "nodename=n3", "state=drain", "reason=fleetmedic: hold (ops)")
    assert cluster.get_node("n3")["metadata"]["labels"][OWNER_LABEL] == "foreign"
    # no repair taint of ours is shown there: the loop's "resume" edit writes nothing...
    cluster.update_node("n3", unfence)
    # ... and any write that would change the node is refused
    with pytest.raises(ForeignDrain):
        cluster.update_node("n3", lambda n: nodeedit.set_annotation(n, keys.ANN_STATE_SINCE, "x"))
    info = slurm.nodes()["n3"]
    assert "DRAIN" in info["state_flags"] and info["reason"] == "fleetmedic: hold (ops)"
    with pytest.raises(PermanentError, match="labels are derived"):
        cluster.update_node("n1", lambda n: nodeedit.set_label(n, "team", "a"))
    with pytest.raises(NotFoundError):
        cluster.get_node("n9")


def test_the_watch_yields_what_changed_and_versions_only_grow(slurm, cluster):
    _, listed = cluster.list_nodes()
    slurm.run("scontrol", "update", "nodename=n3", "state=drain", "reason=fleetmedic: reboot: x")
    events = list(itertools.islice(cluster.watch_nodes(listed, timeout=10), 1))
    assert [(t, n["metadata"]["name"]) for t, n in events] == [("MODIFIED", "n3")]
    assert view(events[0][1], VOCAB).state == "reboot"
    assert int(events[0][1]["metadata"]["resourceVersion"]) > int(listed)
    # nothing changed: the watch ends at its timeout with nothing
    assert list(cluster.watch_nodes(listed, timeout=1)) == []
    # a write's document is newer than any read that started before it
    read_version = cluster.list_nodes()[1]
    written = cluster.update_node("n1", lambda n: fence(n, "reboot"))
    assert int(written["metadata"]["resourceVersion"]) > int(read_version)


def test_events_are_lines_the_timeline_reads(cluster, tmp_path):
    node = cluster.get_node("n1")
    cluster.post_event(node, "RepairStarted", "reboot: attempt 1", type="Normal")
    cluster.post_event(cluster.get_node("n2"), "Other", "n2's")
    got = cluster.list_node_events("n1")
    assert [(e["reason"], e["message"]) for e in got] == [("RepairStarted", "reboot: attempt 1")]
    (tmp_path / "events.jsonl").open("a").write('{"cut by a cra')  # a crash mid-line
    assert len(cluster.list_node_events("n1")) == 1


def test_no_pods_on_slurm_and_no_node_deletion(cluster):
    assert cluster.list_pods_on_node("n1") == ([], "")
    with pytest.raises(PermanentError, match="jobs, not pods"):
        cluster.evict_pod("default", "x")
    with pytest.raises(PermanentError, match="replace rung"):
        cluster.delete_node("n1", "uid")


def test_a_node_a_restarted_slurmctld_does_not_know_yet_is_not_judged(slurm, cluster):
    """After a slurmctld restart a node is UNKNOWN until its slurmd registers (boot time 0,
    sometimes no reason): the watch keeps its last document (our drain still shown) and a
    write waits (TemporaryError), so our drain is never taken for none and nothing lost."""
    cluster.update_node("n3", lambda n: fence(n, "reboot", **{keys.ANN_IN_FLIGHT: "x"}))
    # the product's own check that slurmctld saved it (adapters/slurmsave.py reads the
    # node_state file of this slurmctld; no fixed wait)
    assert cluster.wait_saved("n3", time.time(), threading.Event())
    cluster.list_nodes()
    slurm.stop_proc("slurmd-n3")
    try:
        slurm.stop_proc("slurmctld", kill=True)
        slurm.start_ctld()

        def unknown() -> bool:
            try:
                return slurm.nodes()["n3"]["state"] == "unknown"
            except Exception:  # (slurmctld still starting)
                return False

        wait_until(unknown, 30, "n3 UNKNOWN to the restarted slurmctld")
        docs, _ = cluster._read()
        assert view(docs["n3"], VOCAB).state == "reboot", "the last document is kept"
        assert docs["n3"]["metadata"]["annotations"][keys.ANN_IN_FLIGHT] == "x"
        with pytest.raises(TemporaryError, match="does not know its state yet"):
            cluster.update_node("n3", unfence)
    finally:
        slurm.start_slurmd("n3")
        slurm.wait_ready(90)
    assert view(cluster.get_node("n3"), VOCAB).state == "reboot", "ours again once it registers"
