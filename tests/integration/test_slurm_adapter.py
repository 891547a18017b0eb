"""The Slurm adapter (controller/fleetmedic/adapters/slurm.py) on a real slurmctld and
real slurmd (tests/harness/slurm.py): fence, read back, unfence ours, refuse foreign
drains, the record in Extra across a slurmctld crash, and names refused before any tool
runs. The release contract: every test here runs on every Slurm release, 26.05 too
(slurm_contract, tests/harness/slurm_fixtures.py)."""

from __future__ import annotations

import json
import time

import pytest

from fleetmedic.adapters.slurm import (
    BadNodeName,
    ForeignDrain,
    ForeignField,
    Slurm,
)
from fleetmedic.errors import ConfigError, NotFoundError, PermanentError, TemporaryError
from fleetmedic.model.slurmreason import is_ours

pytestmark = [pytest.mark.slurm_contract]


@pytest.fixture
def adapter(slurm):
    yield Slurm(slurm.env["SLURM_CONF"])
    slurm.reset_nodes()  # the shared cluster as the next test expects it


def test_fence_reads_back_and_unfence_resumes_ours(slurm, adapter):
    t0 = int(time.time())
    reason = adapter.fence(
        "n1", "reboot", "xid 79 on GPU 0: fallen off the bus", {"fleetmedic.io/in-flight": "x"}
    )
    assert reason == "fleetmedic: reboot: xid 79 on GPU 0: fallen off the bus"
    n1 = adapter.node("n1")
    assert n1.drain and n1.drained and n1.state == "idle"
    assert n1.reason == reason
    assert n1.reason_user == "root"
    assert n1.reason_time is not None and t0 - 2 <= n1.reason_time <= time.time() + 2
    assert n1.partitions == ("gpu",)
    assert n1.record == {"fleetmedic.io/in-flight": "x"}
    # what an operator sees with the stock tools
    assert "fleetmedic: reboot: xid 79" in slurm.run("sinfo", "-R", "-h", "-o", "%E|%N")
    assert "State=IDLE+DRAIN" in slurm.run("scontrol", "show", "node", "n1")
    # the others untouched
    assert not adapter.node("n2").drain

    assert adapter.unfence("n1") is True
    n1 = adapter.node("n1")
    assert not n1.drain and n1.reason == ""
    assert n1.record == {"fleetmedic.io/in-flight": "x"}  # resume keeps Extra
    assert adapter.unfence("n1") is False  # nothing to resume: no scontrol error


def test_a_higher_rung_rewrites_our_own_drain(adapter):
    adapter.fence("n1", "reboot", "xid 79")
    adapter.fence("n1", "reimage", "reboot did not cure xid 79")
    assert adapter.node("n1").reason == "fleetmedic: reimage: reboot did not cure xid 79"


@pytest.mark.parametrize(
    "reason",
    [
        "NHC: check_hw_gpu: GPU 0 missing",
        "Action:Reboot",
        "[hardware_problem] ib0 down",
        "slurm-operator: NodeSet drain",
        "RMA 4711 (alice)",
    ],
)
def test_foreign_drains_are_never_fenced_over_nor_resumed(slurm, adapter, reason):
    slurm.run("scontrol", "update", "nodename=n2", "state=drain", f"reason={reason}")
    with pytest.raises(ForeignDrain, match="not fenced: its reason is not ours") as e:
        adapter.fence("n2", "reboot", "xid 79")
    assert "\n" not in str(e.value)
    with pytest.raises(ForeignDrain, match="not resumed"):
        adapter.unfence("n2")
    n2 = adapter.node("n2")
    assert n2.drain and n2.reason == reason


def test_our_drain_edited_by_someone_else_is_theirs(slurm, adapter):
    adapter.fence("n3", "reboot", "xid 79")
    slurm.run("scontrol", "update", "nodename=n3", "state=drain", "reason=alice: keep it drained")
    with pytest.raises(ForeignDrain):
        adapter.unfence("n3")
    assert adapter.node("n3").reason == "alice: keep it drained"


def test_record_merges_keeps_other_keys_and_refuses_a_foreign_extra(slurm, adapter):
    slurm.run("scontrol", "update", "nodename=n2", 'extra={"site":{"rack":"r7"}}')
    adapter.record("n2", {"fleetmedic.io/history": json.dumps([{"rung": "reboot"}]), "a": "1"})
    got = adapter.record("n2", {"a": None, "fleetmedic.io/state-since": "2026-11-26T20:00:00Z"})
    n2 = adapter.node("n2")
    assert (
        n2.record
        == got
        == {
            "fleetmedic.io/history": '[{"rung": "reboot"}]',
            "fleetmedic.io/state-since": "2026-11-26T20:00:00Z",
        }
    )
    assert json.loads(n2.extra)["site"] == {"rack": "r7"}

    slurm.run("scontrol", "update", "nodename=n3", "extra=gpu-type=h100 owner=team-a")
    with pytest.raises(ForeignField, match="Extra holds something else"):
        adapter.record("n3", {"a": "1"})
    with pytest.raises(ForeignField):
        adapter.fence("n3", "reboot", "xid 79", {"a": "1"})
    n3 = adapter.node("n3")
    assert n3.extra == "gpu-type=h100 owner=team-a" and not n3.drain


def test_partitions_filter(adapter):
    assert [n.name for n in adapter.nodes(["gpu"])] == ["n1", "n2", "n3"]
    assert adapter.nodes(["cpu"]) == []


@pytest.mark.parametrize(
    "name", ["n1;id", "n1 n2", "n[1-2]", "n1,n2", "$(touch /tmp/x)", "-n1", "", "n1\nn2", "a" * 64]
)
def test_bad_node_names_are_refused_before_any_tool_runs(slurm, name):
    # with no Slurm tools at all: a refusal that ran scontrol would say "not found"
    adapter = Slurm(slurm.env["SLURM_CONF"], bin_dir="/nonexistent")
    for call in (
        lambda: adapter.fence(name, "reboot", "x"),
        lambda: adapter.unfence(name),
        lambda: adapter.record(name, {"a": "b"}),
        lambda: adapter.node(name),
    ):
        with pytest.raises(BadNodeName) as e:
            call()
        msg = str(e.value)
        assert msg.startswith("refused Slurm node name") and "\n" not in msg


def test_unknown_node_and_missing_conf(slurm, adapter):
    with pytest.raises(NotFoundError, match="n9: not found"):
        adapter.fence("n9", "reboot", "x")
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match="no such file"):
        Slurm("/nonexistent/slurm.conf")
    assert time.monotonic() - t0 < 1


NEWEST_DATA_PARSER = {"22.05": None, "24.11": "v0.0.42", "26.05": "v0.0.45"}


def test_nodes_are_read_with_the_newest_data_parser_the_release_ships(slurm, adapter):
    """26.05 deprecates data_parser v0.0.42 (its release notes: removed in 26.11), so the
    node list is read with the newest version this Slurm ships of those fleetmedic reads:
    v0.0.45 on 26.05; on 24.11, after the newer ones it does not have, v0.0.42; 22.05 has
    none (sinfo --json). The version found is kept: the next read is one command."""
    nodes = adapter.nodes()
    assert [n.name for n in nodes] == ["n1", "n2", "n3"] and all(n.partitions for n in nodes)
    assert adapter.data_parser == NEWEST_DATA_PARSER[slurm.version]
    runs = sum(adapter.calls.values())
    adapter.nodes()
    assert sum(adapter.calls.values()) == runs + 1


def test_state_survives_a_slurmctld_sigkill_and_another_bastion_reads_it(slurm_factory):
    c = slurm_factory(nodes=2)
    a = Slurm(c.env["SLURM_CONF"])
    rec = {"fleetmedic.io/in-flight": json.dumps({"step": "reboot", "attempt": 2})}
    reason = a.fence("n1", "reboot", "xid 79", rec)
    c.wait_saved(reason, "attempt")
    before = a.node("n1")
    c.restart_ctld(kill=True)
    after = Slurm(c.env["SLURM_CONF"]).node("n1")  # a new adapter: a bastion taking over
    assert after.reason == reason and after.drain
    assert after.record == rec
    assert (after.reason_user, after.reason_time) == (before.reason_user, before.reason_time)
    assert Slurm(c.env["SLURM_CONF"]).unfence("n1") is True


def test_an_unreachable_slurmctld_is_a_temporary_error(slurm_factory):
    c = slurm_factory(nodes=1)
    c.stop_proc("slurmctld")
    t0 = time.monotonic()
    with pytest.raises(TemporaryError) as e:
        Slurm(c.env["SLURM_CONF"], timeout=60).nodes()
    assert "\n" not in str(e.value)
    print(f"unreachable slurmctld reported after {time.monotonic() - t0:.1f}s: {e.value}")


def test_a_fence_on_a_busy_node_is_draining_until_its_job_ends(slurm, adapter, tmp_path):
    go = tmp_path / "go"
    out = slurm.run(
        "sbatch",
        "--parsable",
        "-w",
        "n3",
        "-o",
        str(tmp_path / "job.out"),
        "--wrap",
        f"while [ ! -e {go} ]; do sleep 0.2; done; echo finished",
    )
    job = out.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 60
        while adapter.node("n3").state not in ("allocated", "mixed"):
            assert time.monotonic() < deadline, "the job never started on n3"
            time.sleep(0.2)
        adapter.fence("n3", "reboot", "xid 79")
        n3 = adapter.node("n3")
        assert n3.drain and not n3.drained  # sinfo: draining
        assert "draining" in slurm.run("sinfo", "-h", "-n", "n3", "-o", "%T")
        go.touch()
        deadline = time.monotonic() + 60
        while not adapter.node("n3").drained:
            assert time.monotonic() < deadline, "n3 never became drained after its job ended"
            time.sleep(0.2)
        assert adapter.node("n3").reason == "fleetmedic: reboot: xid 79"
        assert (tmp_path / "job.out").read_text().strip() == "finished"
    finally:
        go.touch()
        slurm.run("scancel", job, check=False)


def test_requeue_empties_a_draining_node(slurm, adapter, tmp_path):
    # n1 and n2 held by someone else, so the job lands on n3
    for n in ("n1", "n2"):
        slurm.run("scontrol", "update", f"nodename={n}", "state=drain", "reason=hold for test")
    job = slurm.run(
        "sbatch", "--parsable", "-o", str(tmp_path / "%j.out"), "--wrap", "sleep 300"
    ).strip()
    try:
        deadline = time.monotonic() + 60
        while adapter.jobs("n3") != [job]:
            assert time.monotonic() < deadline, "the job never started on n3"
            time.sleep(0.2)
        for n in ("n1", "n2"):
            slurm.run("scontrol", "update", f"nodename={n}", "state=resume")
        adapter.fence("n3", "reboot", "xid 79")
        assert not adapter.node("n3").drained
        assert adapter.requeue("n3") == [job]
        deadline = time.monotonic() + 60
        # sinfo may say drained a moment before squeue stops listing the job (COMPLETING).
        # The whole-cluster read: a single-node read's idle/mixed can lag on 24.11
        # (Slurm.node, adapters/slurmread.py)
        while not (adapter.node_full("n3").drained and adapter.jobs("n3") == []):
            assert time.monotonic() < deadline, (
                f"n3 not drained after the requeue: {adapter.node_full('n3')}, "
                f"jobs {adapter.jobs('n3')}"
            )
            time.sleep(0.2)
        shown = slurm.run("scontrol", "show", "job", job)
        assert "JobState=PENDING" in shown and "Restarts=1" in shown
    finally:
        slurm.run("scancel", job, check=False)


def test_a_job_that_refuses_requeue_is_named(slurm, adapter, tmp_path):
    job = slurm.run(
        "sbatch",
        "--parsable",
        "--no-requeue",
        "-w",
        "n2",
        "-o",
        str(tmp_path / "%j.out"),
        "--wrap",
        "sleep 300",
    ).strip()
    try:
        deadline = time.monotonic() + 60
        while adapter.jobs("n2") != [job]:
            assert time.monotonic() < deadline, "the job never started on n2"
            time.sleep(0.2)
        with pytest.raises(PermanentError, match=f"scontrol requeue {job}:") as e:
            adapter.requeue("n2")
        assert "\n" not in str(e.value)
        assert adapter.jobs("n2") == [job]
    finally:
        slurm.run("scancel", job, check=False)


def test_our_drain_stays_ours_while_the_node_is_gone_and_after_it_returns(slurm_factory):
    """What a reboot by our role looks like to Slurm: slurmd goes away, slurmctld marks the
    node DOWN+NOT_RESPONDING, and slurmd registers again. Our reason must survive it, or
    the node would turn foreign and never be resumed."""
    c = slurm_factory(nodes=2, slurmd_timeout=10)
    a = Slurm(c.env["SLURM_CONF"])
    reason = a.fence("n1", "reboot", "xid 79", {"fleetmedic.io/in-flight": "reboot"})
    c.stop_proc("slurmd-n1", kill=True)
    deadline = time.monotonic() + 120
    # first NOT_RESPONDING (sinfo: drained*), DOWN after SlurmdTimeout
    while (n1 := a.node("n1")).state != "down":
        assert time.monotonic() < deadline, f"n1 never marked down: {n1}"
        time.sleep(0.5)
    said = c.marked_down(reason)  # (24.11 appends Slurm's own words to ours)
    assert "NOT_RESPONDING" in n1.flags and n1.drain and n1.reason == said
    assert is_ours(n1.reason) and n1.record == {"fleetmedic.io/in-flight": "reboot"}
    c.start_slurmd("n1")
    deadline = time.monotonic() + 120
    while (n1 := a.node("n1")).state != "idle" or "NOT_RESPONDING" in n1.flags:
        assert time.monotonic() < deadline, f"n1 never registered again: {n1}"
        time.sleep(0.5)
    assert n1.drained and n1.reason == said
    assert a.unfence("n1") is True
