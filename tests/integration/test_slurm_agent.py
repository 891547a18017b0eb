"""``fleetmedic agent`` on a Slurm node (no Kubernetes): the real agent process against
the real slurmctld and slurmd (tests/harness/slurm.py). It follows a kernel log the test
appends real-format Xid lines to and fences through ``scontrol`` (a drain with our
reason, its record in the node's Extra), with the same policy as on Kubernetes:
fences only go up, checks skipped under our repair, someone else's drain never touched.
The release contract (the single-node read and its RPCs, the writes): every test here runs
on every Slurm release, 26.05 too (slurm_contract, tests/harness/slurm_fixtures.py)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import pytest

from fleetmedic.model import keys
from tests.harness.agentenv import (
    FLEETMEDIC,
    AgentProcess,
    append,
    banner,
    h100,
    nvml_env,
    wait_until,
    xid_line,
)
from tests.harness.slurmbig import parse_sdiag, rpc_delta

OK_LINE = "[    1.000000] kernel: clean boot\n"
pytestmark = [pytest.mark.slurm_contract]


@pytest.fixture
def node_env(slurm, tmp_path):
    """A kernel log and boot id for one Slurm node's agent, and a runner for it."""
    kern = tmp_path / "kern.log"
    kern.write_text(banner() + OK_LINE)
    boot = tmp_path / "boot_id"
    boot.write_text(f"{uuid.uuid4()}\n")

    def argv(node: str, *args: str, conf: str | None = None) -> list[str]:
        return [
            str(FLEETMEDIC),
            "agent",
            "--node-name",
            node,
            "--slurm-conf",
            conf or slurm.env["SLURM_CONF"],
            "--config",
            "/dev/null",
            "--kernel-log",
            str(kern),
            "--boot-id-file",
            str(boot),
            "--vendor",
            "none",
            *args,
        ]

    def once(node: str, *args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*argv(node, *args, **kw), "--once"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**_env(), **(env or {})},
        )

    yield kern, argv, once
    slurm.reset_nodes()  # the shared cluster as the next test expects it


def _env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env.pop("KUBERNETES_SERVICE_HOST", None)
    env.pop("SLURM_CONF", None)  # only --slurm-conf names the cluster
    return env


def _json(r: subprocess.CompletedProcess) -> dict:
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    return json.loads(r.stdout)


def record(slurm, node: str) -> dict:
    extra = slurm.nodes()[node]["extra"]
    return json.loads(extra)["fleetmedic"] if extra else {}


def reason(slurm, node: str) -> str:
    return slurm.nodes()[node]["reason"]


def test_xid_79_drains_the_node_with_our_reason_and_record_once(slurm, node_env):
    kern, _, once = node_env
    append(kern, xid_line(code=79, bus=0x3B, uptime=120.5))
    r = once("n1")
    out = _json(r)  # the kernel log fences, then the round (skipping the GPU)
    # a --once run reads with sinfo -n: the library's process would cost more than it saves
    assert "reading Slurm nodes through" not in r.stderr
    assert out["kernel_findings_acted"] == 1 and out["fenced"] is None
    n1 = slurm.nodes()["n1"]
    assert "DRAIN" in n1["state_flags"]
    assert n1["reason"].startswith("fleetmedic: reboot: xid.79 0000:3b:00"), n1["reason"]
    assert "fallen off the bus" in n1["reason"]
    # what an operator sees with the stock tools
    assert "fleetmedic: reboot: xid.79" in slurm.run("sinfo", "-R", "-h", "-o", "%E|%N")
    assert slurm.run("sinfo", "-h", "-n", "n1", "-o", "%T").strip() in ("drained", "draining")
    # the agent's record, what the annotations hold on Kubernetes, in Extra
    rec = record(slurm, "n1")
    mark = json.loads(rec[keys.ANN_LAST_FINDING])
    assert mark["rule"] == "xid.79" and mark["pci"] == "0000:3b:00" and mark["acted"] is True
    assert json.loads(rec[keys.ANN_STRIKES]) == {"gpu": 0, "network": 0}
    assert json.loads(rec[keys.ANN_LAST_RESULTS])["gpu"]["status"] == "skipped"
    # the others untouched
    assert not slurm.nodes()["n2"]["reason"] and not slurm.nodes()["n2"]["extra"]

    # a second run knows the line by its watermark in Extra: nothing acted on again
    before = reason(slurm, "n1")
    again = _json(once("n1"))
    assert again["kernel_findings_acted"] == 0 and again["kernel_findings_already_handled"] == 1
    assert reason(slurm, "n1") == before


def test_a_drain_by_someone_else_is_never_touched(slurm, node_env):
    kern, _, once = node_env
    theirs = "NHC: check_hw_gpu: GPU 2 missing"
    site = '{"site":{"rack":"r12"}}'
    slurm.run("scontrol", "update", "nodename=n2", "state=drain", f"reason={theirs}")
    slurm.run("scontrol", "update", "nodename=n2", f"extra={site}")
    append(kern, xid_line(code=79, uptime=130.0))
    r = once("n2")
    out = _json(r)
    assert out["kernel_findings_acted"] == 1 and "drained by someone else" in out["held"]
    n2 = slurm.nodes()["n2"]
    assert n2["reason"] == theirs and n2["extra"] == site and "DRAIN" in n2["state_flags"]
    said = [ln for ln in r.stderr.splitlines() if "not writing n2" in ln]
    assert len(said) == 1 and "NHC: check_hw_gpu" in said[0], r.stderr


def test_fences_only_go_up_on_slurm(slurm, node_env):
    kern, _, once = node_env
    append(kern, xid_line(code=95, bus=0x18, uptime=140.0, text="Uncontained memory error."))
    assert _json(once("n1"))["kernel_findings_acted"] == 1
    assert reason(slurm, "n1").startswith("fleetmedic: reset: xid.95 0000:18:00")
    append(kern, xid_line(code=79, bus=0x3B, uptime=150.0))
    assert _json(once("n1"))["kernel_findings_acted"] == 1
    assert reason(slurm, "n1").startswith("fleetmedic: reboot: xid.79 0000:3b:00")
    assert json.loads(record(slurm, "n1")[keys.ANN_LAST_FINDING])["rule"] == "xid.79"
    # a weaker finding afterwards never lowers it
    append(kern, xid_line(code=95, bus=0x28, uptime=160.0, text="Uncontained memory error."))
    assert _json(once("n1"))["kernel_findings_acted"] == 1
    assert reason(slurm, "n1").startswith("fleetmedic: reboot: xid.79")


def test_checks_are_skipped_on_a_node_we_drained(slurm, node_env, tmp_path):
    """A failing GPU (fake NVML: an uncorrectable ECC error) strikes an undrained node;
    on a node under our drain the GPU checks do not run at all."""
    _, _, once = node_env
    (tmp_path / "nvml.json").write_text(
        json.dumps(h100(2, **{"1": {"ecc_volatile_uncorrected": 2}}))
    )
    env = nvml_env(tmp_path)
    bad = _json(once("n3", "--vendor", "nvidia", "--expected-gpus", "2", env=env))
    assert bad["strikes"]["gpu"] == 1, bad
    assert json.loads(record(slurm, "n3")[keys.ANN_LAST_RESULTS])["gpu"]["status"] == "problem"
    assert not reason(slurm, "n3")  # one strike: not fenced yet

    slurm.run(
        "scontrol", "update", "nodename=n1", "state=drain", "reason=fleetmedic: reboot: xid 79"
    )
    out = _json(once("n1", "--vendor", "nvidia", "--expected-gpus", "2", env=env))
    assert out["strikes"]["gpu"] == 0 and out["fenced"] is None
    gpu = json.loads(record(slurm, "n1")[keys.ANN_LAST_RESULTS])["gpu"]
    assert gpu["status"] == "skipped" and "under repair (reboot)" in gpu["detail"]
    assert reason(slurm, "n1") == "fleetmedic: reboot: xid 79"


def test_the_running_agent_drains_within_a_second(slurm, node_env, tmp_path):
    kern, argv, _ = node_env
    a = AgentProcess("n1", tmp_path / "unused", tmp_path / "agent.log")
    a.argv = [*argv("n1", "--interval", "1"), "--log-level", "debug"]
    a.env = {**_env(), "PYTHONUNBUFFERED": "1"}
    with a:
        wait_until("the agent to follow", lambda: ": following (" in a.output(), 60, 0.05, a.tail)
        t0 = time.monotonic()
        append(kern, xid_line(code=79, uptime=170.0))
        wait_until(
            "n1 drained",
            lambda: reason(slurm, "n1").startswith("fleetmedic: reboot: xid.79"),
            20,
            0.01,
            a.tail,
        )
        latency = time.monotonic() - t0
        print(f"\nXid 79 line -> Slurm drain visible: {latency * 1000:.0f} ms")
        assert latency < 5.0
        assert a.stop() == 0
    assert reason(slurm, "n1").startswith("fleetmedic: reboot: xid.79")  # SIGTERM keeps it
    assert "Traceback" not in a.output()


@pytest.mark.parametrize(
    "node, conf, code, fragment",
    [
        ("n1", "/nonexistent/slurm.conf", 2, "SLURM_CONF /nonexistent/slurm.conf"),
        ("n1;id", None, 2, "refused Slurm node name"),
        ("n9", None, 2, "n9"),
    ],
)
def test_bad_input_is_one_line(slurm, node_env, node, conf, code, fragment):
    _, _, once = node_env
    r = once(node, "--log-level", "error", conf=conf)
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "error:" in lines[0] and fragment in lines[0], r.stderr
    assert r.returncode == code, (r.returncode, r.stderr)


def test_an_unreachable_slurmctld_is_one_line_exit_3(slurm_factory, node_env):
    _, _, once = node_env
    c = slurm_factory(nodes=1)
    c.stop_proc("slurmctld")
    r = once("n1", "--log-level", "error", "--once-timeout", "1s", conf=str(c.conf))
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    # the agent reads only its own node (the single-node read), never the whole cluster
    assert len(lines) == 1 and "error:" in lines[0] and c.node_command in lines[0], r.stderr
    assert r.returncode == 3, (r.returncode, r.stderr)


def test_gpu_strikes_fence_with_the_failing_check_as_the_finding(slurm, node_env, tmp_path):
    _, _, once = node_env
    (tmp_path / "nvml.json").write_text(
        json.dumps(h100(2, **{"0": {"ecc_volatile_uncorrected": 3}}))
    )
    args = ("--vendor", "nvidia", "--expected-gpus", "2", "--strike-limit", "2")
    first = _json(once("n3", *args, env=nvml_env(tmp_path)))
    assert first["strikes"]["gpu"] == 1 and first["fenced"] is None and not reason(slurm, "n3")
    second = _json(once("n3", *args, env=nvml_env(tmp_path)))
    assert second["fenced"] == "reboot", second
    why = reason(slurm, "n3")
    assert why.startswith("fleetmedic: reboot: gpu problem: "), why
    print(f"\nreason after 2 GPU strikes: {why}")
    # the fence starts the count over, as on Kubernetes; the evidence stays in the record
    assert json.loads(record(slurm, "n3")[keys.ANN_STRIKES])["gpu"] == 0
    assert json.loads(record(slurm, "n3")[keys.ANN_LAST_RESULTS])["gpu"]["status"] == "problem"


def test_an_extra_that_is_not_json_is_never_written_over(slurm, node_env):
    """Someone keeps plain text in n3's Extra: our record cannot live beside it, so the
    agent writes nothing there (no drain without its record), says so once and exits."""
    kern, _, once = node_env
    slurm.run("scontrol", "update", "nodename=n3", "extra=rack 12, row B")
    append(kern, xid_line(code=79, uptime=180.0))
    r = once("n3")
    out = _json(r)
    assert "Extra holds something else" in out["held"]
    n3 = slurm.nodes()["n3"]
    assert n3["extra"] == "rack 12, row B" and not n3["reason"]
    assert len([ln for ln in r.stderr.splitlines() if "not writing n3" in ln]) == 1, r.stderr


def test_a_healthy_round_asks_slurmctld_nothing_and_a_write_reads_one_node(
    slurm, node_env, tmp_path
):
    """Issue 37: an agent reads only its own node, with one small request, and only when it
    needs to. Counted by slurmctld itself (sdiag's RPCs by type) around the running agent:
    healthy rounds ask nothing at all (the agent keeps what it read and wrote,
    ``slurm.read_every``); a round with something to write (a failing GPU: a strike) reads
    the node once with the single-node request and writes once; nothing reads the whole
    cluster. On the host's release the agent reads through the Slurm library
    (adapters/slurmlib.py): REQUEST_NODE_INFO_SINGLE alone. A tree's release puts wrapper
    scripts on PATH, in which no library is found: the agent reads with ``sinfo -n``, which
    adds the partition table."""
    _, argv, _ = node_env
    nvml = tmp_path / "nvml.json"
    nvml.write_text(json.dumps(h100(2)))
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("slurm: {read_every: 300s}\n")
    a = AgentProcess("n2", tmp_path / "unused", tmp_path / "agent.log")
    a.argv = argv("n2", "--interval", "1", "--vendor", "nvidia", "--expected-gpus", "2")
    a.argv += ["--log-level", "debug"]  # (a round with nothing new logs at debug)
    a.argv[a.argv.index("/dev/null")] = str(cfg)
    a.env = {**_env(), **nvml_env(tmp_path), "PYTHONUNBUFFERED": "1"}
    with a:

        def rounds(text: str = "round ") -> int:
            return a.output().count(text)

        # the first round reads the node and records the GPU vendor it found (one write)
        wait_until("the vendor recorded", lambda: record(slurm, "n2"), 60, 0.2, a.tail)
        assert record(slurm, "n2")["fleetmedic.io/gpu-vendor"] == "nvidia"
        before, seen = sdiag(slurm), rounds()
        wait_until("four healthy rounds", lambda: rounds() >= seen + 4, 60, 0.1, a.tail)
        healthy = rpcs(before, sdiag(slurm))
        assert not healthy.keys() & AGENT_RPCS, f"healthy rounds asked slurmctld: {healthy}"

        nvml.write_text(json.dumps(h100(2, **{"1": {"ecc_volatile_uncorrected": 2}})))
        before, seen = sdiag(slurm), rounds("strikes gpu 1/3")
        wait_until("a strike", lambda: rounds("strikes gpu 1/3") > seen, 60, 0.05, a.tail)
        nvml.write_text(json.dumps(h100(2)))  # (healthy again: no more writes but a reset)
        failing = rpcs(before, sdiag(slurm))
        assert a.stop() == 0
    assert "REQUEST_NODE_INFO" not in failing, f"a whole-cluster read: {failing}"
    writes = failing["REQUEST_UPDATE_NODE"]
    assert writes >= 1 and failing["REQUEST_NODE_INFO_SINGLE"] == writes, failing
    through_library = "reading Slurm nodes through" in a.output()
    assert through_library == (slurm.root is None), a.tail()
    # (sinfo's second RPC; the library's read has none)
    assert failing.get("REQUEST_PARTITION_INFO", 0) == (0 if through_library else writes), failing


AGENT_RPCS = {
    "REQUEST_NODE_INFO",
    "REQUEST_NODE_INFO_SINGLE",
    "REQUEST_PARTITION_INFO",
    "REQUEST_UPDATE_NODE",
}


def sdiag(slurm):
    return parse_sdiag(slurm.run("sdiag"))


def rpcs(before, after):
    return rpc_delta(before, after)
