"""The controller end to end: a real API server with kwok Nodes whose InternalIP is a
test-fleet node (real sshd, real reboots), real Ansible through ansible-runner, a real
SMTP sink, and ``fleetmedic run`` as a real subprocess (so it can be SIGKILLed). The
only stand-ins are the GPU (fake libnvidia-ml.so) and the kernel log (a file); see
tests/harness/ctlenv.py for how a fault is made and what the test config shortens.
"""

from __future__ import annotations

import io
import json
import random
import tarfile
import threading
import time

import pytest
import yaml

from tests.harness import ctlenv, ctlwait
from tests.harness.ctlbench import Benches, pool_name
from tests.harness.ctlenv import (
    annotation,
    cli,
    history,
    state_of,
    taints,
    wait_state,
    wait_until,
)
from tests.harness.smtp import attachments, body_text

pytestmark = [pytest.mark.fleet, pytest.mark.kube, pytest.mark.slow]

FOREIGN = {"key": "example.com/team-maintenance", "value": "gpu-burn", "effect": "NoSchedule"}
REPAIR_KEY = "fleetmedic.io/repair"


@pytest.fixture
def bench(kube, fleet_factory, tmp_path, request):
    """A fresh fleet (1 node unless the test is parametrised otherwise), its nodes prepared,
    and a helper that starts controllers and stops them at the end (log shown on failure)."""
    benches = Benches(kube, fleet_factory, tmp_path)
    yield lambda nodes=1: benches.new(nodes, pool_name(request.node.name.split("_")[1][:6].lower()))
    benches.stop_controllers(log_lines=80)


def condition(kube, name: str) -> tuple[str, str, str] | None:
    """fleetmedic's NodeCondition as `kubectl describe node` shows it: status, reason, message."""
    for c in ctlenv.node(kube, name)["status"].get("conditions") or []:
        if c["type"] == "FleetmedicRepair":
            return c["status"], c["reason"], c["message"]
    return None


def test_a_rebooted_and_untainted_when_checks_pass_after_boot(bench):
    b = bench(1)
    node = b.fleet.node(1)
    ctlenv.xid79(node)  # fails `fleetmedic check` until a reboot
    [name] = b.register({1: [ctlenv.repair_taint("reboot"), FOREIGN]})
    boot_before, boots = node.boot_id(), node.boots
    cfg = b.config()
    proc = b.controller(cfg)
    port = yaml.safe_load(cfg.read_text())["metrics"]["port"]

    def scrape(series: str) -> float | None:
        """The running controller's /metrics over HTTP, as Prometheus reads it."""
        return ctlenv.scrape(port, series)

    # while it is under repair the node has a state-since series and counts as in reboot
    wait_until(
        lambda: (
            scrape(f'fleetmedic_node_state_since_timestamp_seconds{{node="{name}",state="reboot"}}')
            and scrape('fleetmedic_nodes{state="reboot"}') == 1
        ),
        60,
        "the scrape to show the node in repair",
        interval=0.2,
    )
    wait_until(
        lambda: (condition(b.kube, name) or ())[:2] == ("True", "Reboot"),
        60,
        "the FleetmedicRepair condition to say Reboot",
        interval=0.2,
    )
    wait_state(b.kube, name, "healthy", proc, 240)
    wait_until(
        lambda: scrape('fleetmedic_time_to_repair_seconds_count{repair="automatic"}') == 1,
        30,
        "the scrape to show one automatic repair",
    )
    assert scrape('fleetmedic_nodes{state="healthy"}') == 1
    assert (
        scrape(f'fleetmedic_node_state_since_timestamp_seconds{{node="{name}",state="reboot"}}')
        is None
    )
    assert 0 < scrape('fleetmedic_time_to_repair_seconds_sum{repair="automatic"}') < 240
    assert node.boot_id() != boot_before and node.boots == boots + 1
    n = ctlenv.node(b.kube, name)
    assert taints(b.kube, name) == [FOREIGN], "only our taint went"
    assert not n["spec"].get("unschedulable"), "our own cordon was undone"
    ann = n["metadata"]["annotations"]
    assert "fleetmedic.io/in-flight" not in ann and "fleetmedic.io/cordoned" not in ann
    assert n["metadata"]["labels"]["fleetmedic.io/state"] == "healthy"
    [attempt] = history(b.kube, name)
    assert (attempt["step"], attempt["result"], attempt["phase"]) == ("reboot", "pass", "verify")
    assert attempt["run_id"] and attempt["start"] <= attempt["end"]
    events = b.kube.request(
        "GET", f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D{name}"
    )["items"]
    assert {"RepairStarted", "Repaired"} <= {e["reason"] for e in events}
    status_, reason, message = condition(b.kube, name)
    assert (status_, reason) == ("False", "Repaired") and "after reboot pass" in message
    status = cli(cfg, "status", "--json")
    assert status.returncode == 0, status.stderr
    [row] = json.loads(status.stdout)
    assert (row["name"], row["state"]) == (name, "healthy")

    # the audit trail: one JSON line per action in the controller's log, an Event for each,
    # and `fleetmedic history` merging the attempts and the Events; no boot_id probe run:
    # the diagnose run published the boot id the reboot is checked against
    audits = [
        json.loads(line[line.index("{") :])
        for line in proc.log.read_text().splitlines()
        if '"audit": true' in line
    ]
    done = [(a["what"], a["outcome"]) for a in audits if a["node"] == name]
    # (the node was fenced at reboot by the test, as the agent does: no taint of ours)
    assert [w for w, _ in done] == ["diagnose", "drain", "reboot", "verify"], done
    assert all(o == "ok" for _, o in done)
    reboot = next(a for a in audits if a["what"] == "reboot")
    assert reboot["run_id"] and reboot["who"].startswith("fleetmedic controller ")
    assert reboot["step"] == "reboot" and reboot["episode"] == 1
    h = cli(cfg, "history", name, "--json")
    assert h.returncode == 0, h.stderr
    rows = json.loads(h.stdout)
    assert rows[0]["source"] in ("history", "event") and rows == sorted(
        rows, key=lambda r: r["at"][:19], reverse=True
    )
    whats = [r["what"] for r in rows]
    assert "episode 1: reboot attempt 1 at verify" in whats
    assert {"RepairStarted", "Repaired", "FleetmedicAction"} <= set(whats)
    actions = [r["message"] for r in rows if r["what"] == "FleetmedicAction"]
    assert any(m.startswith("reboot: ok (run ") for m in actions), actions


# -- b) reset -> reboot -> reimage -> manual, one email, release --------------------------
def test_b_broken_gpu_climbs_to_manual_with_one_email_then_release(bench, smtp_sink, webhook):
    """Fenced at the reset rung (as the agent fences a reset-class finding), a GPU that stays
    lost climbs every rung: reset, reboot, reimage, then one email and one chat message;
    the release says so in chat too."""
    b = bench(1)
    node = b.fleet.node(1)
    ctlenv.prepare_apt_repo([node])  # reimage really reinstalls the driver
    ctlenv.gpu_lost(node)  # stays lost through reboot and reinstall
    last_results = {"gpu": "problem", "checks": {"nvidia.driver": "GPU 1: GPU is lost"}}
    [name] = b.register({1: [ctlenv.repair_taint("reset")]})
    b.kube.request(
        "PATCH",
        f"/api/v1/nodes/{name}",
        {"metadata": {"annotations": {"fleetmedic.io/last-results": json.dumps(last_results)}}},
        content_type="application/merge-patch+json",
    )
    boots = node.boots
    chat = {"name": "chat", "url": webhook.url("oncall"), "events": ["escalation", "repaired"]}
    cfg = b.config(smtp_sink, notify={"targets": [chat]})
    proc = b.controller(cfg)
    wait_state(b.kube, name, "manual", proc, 540)
    [msg] = smtp_sink.wait_for(1, timeout=60)
    post = webhook.wait_for(lambda r: "needs hands" in r.body["title"], timeout=60)
    assert post.path == "/oncall" and post.body["type"] == "failure"
    assert post.body["title"].startswith(f"[fleetmedic] {name} needs hands: GPU 1 lost")
    for fact in ("- reset 1 fail", "- reboot 1 fail", "- reimage 1 fail", "release " + name):
        assert fact in post.body["message"], post.body["message"]
    wait_until(
        lambda: (annotation(b.kube, name, "fleetmedic.io/escalated") or {}).get("sent"),
        30,
        "the email recorded",
    )
    ctlwait.looked_again(b.kube, cfg, name)  # cycles that saw the node escalated
    assert len(smtp_sink.messages) == 1, "exactly one email"
    # the cause first (the GPU the diagnose phase found lost, as NVML said it), the rungs
    # tried after it, within what a mail client shows
    assert msg["Subject"].startswith(f"{name} needs hands: GPU 1 lost (GPU_IS_LOST); ")
    assert len(msg["Subject"]) <= 78, msg["Subject"]
    body = body_text(msg)
    assert node.address in body and "GPU is lost" in body and "reimage" in body
    files = attachments(msg)
    report = json.loads(files[f"{name}-escalation.json"])
    assert [(a["step"], a["result"]) for a in report["attempts"]] == [
        ("reset", "fail"),
        ("reboot", "fail"),
        ("reimage", "fail"),
        ("manual", "escalated"),
    ]
    assert "Unable to determine the device handle" in report["attempts"][0]["message"]
    assert report["last_results"] == last_results
    bundles = [f for f in files if f.endswith(".tar.gz")]
    assert len(bundles) == 3, f"the diagnostics of all three attempts: {list(files)}"
    with tarfile.open(fileobj=io.BytesIO(files[bundles[0]])) as tar:
        check = next(m for m in tar.getnames() if m.endswith("commands/fleetmedic-check.json"))
        assert "GPU_IS_LOST" in tar.extractfile(check).read().decode()
    assert node.boots == boots + 2, "none in reset, one in the reboot step, one in reimage"
    assert taints(b.kube, name) == [ctlenv.repair_taint("manual")]
    esc = annotation(b.kube, name, "fleetmedic.io/escalated")
    assert esc["sent"] and esc["ep"] == 1
    assert ctlenv.node(b.kube, name)["spec"].get("unschedulable"), "stays cordoned for the human"
    assert condition(b.kube, name)[:2] == ("True", "Manual")

    # the on-call engineer fixes the GPU and releases the node
    ctlenv.healthy(node)
    r = cli(cfg, "release", name)
    assert r.returncode == 0, r.stderr
    wait_until(lambda: taints(b.kube, name) == [], 30, "release")
    assert not ctlenv.node(b.kube, name)["spec"].get("unschedulable")
    assert history(b.kube, name)[-1]["result"] == "released"
    status_, reason, message = condition(b.kube, name)
    assert (status_, reason) == ("False", "Released") and "released by" in message
    back = webhook.wait_for(lambda r: "back in service" in r.body["title"], timeout=30)
    assert back.body["type"] == "success" and "released by" in back.body["message"]
    admitted = ctlwait.counts(cfg)["admitted"]
    seen = ctlwait.looked_again(b.kube, cfg, name)  # cycles that saw the node released
    assert state_of(b.kube, name) == "healthy" and len(smtp_sink.messages) == 1
    assert seen["admitted"] == admitted, "nothing done to a released node"
    assert [r.body["title"].split(" ", 2)[2] for r in webhook.received] == [
        msg["Subject"].split(" ", 1)[1],
        "is back in service",
    ], "one chat message per event"
    r = cli(cfg, "release", "no-such-node-" + b.pool)
    assert r.returncode != 0 and r.stderr.startswith("fleetmedic: error: ")
    assert len(r.stderr.strip().splitlines()) == 1


# -- g) the reset rung cures without a reboot; a refused reset costs exactly one reboot ----
def test_g_reset_class_fault_is_cured_by_a_gpu_reset_with_no_reboot(bench):
    b = bench(1)
    node = b.fleet.node(1)
    ctlenv.reset_curable(node)
    [name] = b.register({1: [ctlenv.repair_taint("reset")]})
    boot_before, boots = node.boot_id(), node.boots
    proc = b.controller(b.config())
    wait_state(b.kube, name, "healthy", proc, 240)
    assert node.boot_id() == boot_before and node.boots == boots, "the node rebooted"
    [attempt] = history(b.kube, name)
    assert (attempt["step"], attempt["result"], attempt["phase"]) == ("reset", "pass", "verify")
    gpus = json.loads((node.state_dir / "nvml.json").read_text())["gpus"]
    assert [g.get("resets") for g in gpus] == [1, 1] and gpus[1]["recovery_action"] == 0
    assert taints(b.kube, name) == [] and not ctlenv.node(b.kube, name)["spec"].get("unschedulable")


def test_h_refused_reset_falls_through_to_exactly_one_reboot(bench):
    b = bench(1)
    node = b.fleet.node(1)
    ctlenv.reset_refused(node)
    [name] = b.register({1: [ctlenv.repair_taint("reset")]})
    boots = node.boots
    proc = b.controller(b.config())
    wait_state(b.kube, name, "healthy", proc, 300)
    assert node.boots == boots + 1, "exactly one reboot"
    steps = [(a["step"], a["result"]) for a in history(b.kube, name)]
    assert steps == [("reset", "fail"), ("reboot", "pass")], steps
    assert "In use by another client" in history(b.kube, name)[0]["message"]


# -- c) never comes back ------------------------------------------------------------------
def test_c_node_that_never_returns_counts_as_failed_and_nothing_is_stuck(bench, smtp_sink):
    b = bench(1)
    node = b.fleet.node(1)
    ctlenv.xid79(node)
    [name] = b.register({1: [ctlenv.repair_taint("reboot")]})
    node.set_hang(True)  # the next reboot never comes back
    cfg = b.config(smtp_sink)
    # the reboot waits out reboot_timeout for a node that never returns: 10 s, not the
    # tests' 25 s (group_vars), is as much a timeout
    ctlenv.playbook_dir(cfg.parent, {"reboot_timeout": 10})
    proc = b.controller(cfg)
    try:
        wait_state(b.kube, name, "manual", proc, 300)
        smtp_sink.wait_for(1, timeout=60)
        steps = [(a["step"], a["result"]) for a in history(b.kube, name)]
        assert steps[0][0] == "reboot" and steps[0][1] in ("fail", "unreachable", "timeout")
        assert steps[1][0] == "reimage" and steps[1][1] in ("fail", "unreachable", "timeout")
        assert steps[2] == ("manual", "escalated")
        assert "fleetmedic.io/in-flight" not in ctlenv.node(b.kube, name)["metadata"]["annotations"]
        plan = cli(cfg, "plan", "--json")
        assert plan.returncode == 0, plan.stderr
        assert all(i["action"] in ("none", "wait") for i in json.loads(plan.stdout)), plan.stdout
    finally:
        node.set_hang(False)
        b.fleet.reset_faults(timeout=60)


# -- d) someone else's taints are never lost ----------------------------------------------
def test_d_unrelated_taint_churn_during_repair_loses_nothing(bench):
    b = bench(1)
    node = b.fleet.node(1)
    ctlenv.xid79(node)
    [name] = b.register({1: [ctlenv.repair_taint("reboot"), FOREIGN]})
    expected = {(FOREIGN["key"], FOREIGN["value"])}
    errors: list[BaseException] = []
    during_repair = []  # ops done while the node had repair work under way
    rng = random.Random(7)

    def churn() -> None:
        try:
            added: list[str] = []
            for i in range(100):
                if added and (i % 3 == 2):
                    key = added.pop(rng.randrange(len(added)))
                    ctlenv.set_taints(
                        b.kube, name, lambda ts, k=key: [t for t in ts if t["key"] != k]
                    )
                    expected.discard((key, "x"))
                else:
                    key = f"example.com/churn-{i}"
                    ctlenv.set_taints(
                        b.kube,
                        name,
                        lambda ts, k=key: (
                            [*ts, {"key": k, "value": "x", "effect": "PreferNoSchedule"}]
                        ),
                    )
                    added.append(key)
                    expected.add((key, "x"))
                ann = ctlenv.node(b.kube, name)["metadata"].get("annotations") or {}
                during_repair.append("fleetmedic.io/in-flight" in ann)
                time.sleep(rng.uniform(0.02, 0.12))
        except BaseException as exc:  # surfaced in the test thread
            errors.append(exc)

    proc = b.controller(b.config())
    # churn from the moment repair work is under way (the controller's start-up time
    # varies with the machine's load; the overlap is what this test is about)
    wait_until(
        lambda: annotation(b.kube, name, "fleetmedic.io/in-flight") is not None,
        120,
        "the controller to start the repair",
        interval=0.05,
    )
    actor = threading.Thread(target=churn)
    actor.start()
    wait_state(b.kube, name, "healthy", proc, 240)
    actor.join(120)
    assert not errors, errors
    got = {(t["key"], t.get("value")) for t in taints(b.kube, name)}
    assert got == expected, f"lost: {expected - got}, unexpected: {got - expected}"
    assert [a["result"] for a in history(b.kube, name)] == ["pass"]
    assert sum(during_repair) >= 50, (
        f"only {sum(during_repair)} of 100 changes overlapped the repair"
    )


# -- e) kill -9 during the reboot step ----------------------------------------------------
# (killed while the node is down in its reboot: test_nvsentinel_e2e.py's case e, the same
# fleet and ladder run with an API server restart on top, holds that case's assertions)
def test_e_sigkill_at_the_reboot_phase_start_then_restart_reboots_exactly_once(bench):
    b = bench(1)
    node = b.fleet.node(1)
    ctlenv.xid79(node)
    [name] = b.register({1: [ctlenv.repair_taint("reboot")]})
    boots = node.boots
    cfg = b.config()
    first = b.controller(cfg, 1)

    def in_reboot_phase():
        fl = annotation(b.kube, name, "fleetmedic.io/in-flight") or {}
        return fl.get("phase") == "reboot" and fl.get("status") == "running"

    wait_until(in_reboot_phase, 180, "the reboot phase to start")
    first.kill9()
    assert not first.alive
    down_at = node.status().get("state")
    second = b.controller(cfg, 2)
    wait_state(b.kube, name, "healthy", second, 240)
    assert node.boots == boots + 1, f"exactly one reboot (node was {down_at} at the kill)"
    [attempt] = history(b.kube, name)
    assert (attempt["step"], attempt["result"]) == ("reboot", "pass")
    # the restart read the boot id (the probe): audited, but no Event of its own
    audits = [
        json.loads(line[line.index("{") :])
        for line in second.log.read_text().splitlines()
        if '"audit": true' in line
    ]
    assert "probe" in [a["what"] for a in audits if a["node"] == name], audits
    h = cli(cfg, "history", name, "--json")
    assert h.returncode == 0, h.stderr
    actions = [r["message"] for r in json.loads(h.stdout) if r["what"] == "FleetmedicAction"]
    assert actions and not any(m.startswith("probe") for m in actions), actions


# -- f) reset -----------------------------------------------------------------------------
def test_f_reset_removes_only_our_taints(kube, tmp_path):
    pool = pool_name("reset")
    ours = [
        ctlenv.repair_taint("reimage"),
        {"key": "fleetmedic.io/slow-network", "value": "true", "effect": "NoSchedule"},
    ]
    foreign = [
        FOREIGN,
        {"key": REPAIR_KEY, "value": "reboot", "effect": "NoExecute"},  # not our effect
        {"key": "trainy.konduktor.ai/faulty", "value": "true", "effect": "NoSchedule"},
        {"key": "repair-reboot", "value": "true", "effect": "NoSchedule"},
    ]  # ossci names
    # (the API allows one taint per key and effect, so "not our value" is on a node of its own)
    other_value = [*foreign, {"key": REPAIR_KEY, "value": "someday", "effect": "NoSchedule"}]
    names = [f"{pool}-{i}" for i in range(3)]
    kube.make_nodes(names[:2], labels={ctlenv.POOL_LABEL: pool}, taints=ours + foreign)
    kube.make_nodes(
        names[2:], labels={ctlenv.POOL_LABEL: pool}, taints=other_value, unschedulable=True
    )  # cordoned by someone else: stays cordoned
    cfg = ctlenv.write_config(tmp_path, kube, _NoFleet(), pool)
    r = cli(cfg, "reset", input="n\n")
    assert r.returncode != 0 and "2 node(s)" in r.stderr
    assert all(len(taints(kube, n)) == len(ours + foreign) for n in names[:2]), "declined"
    r = cli(cfg, "reset", "--yes")
    assert r.returncode == 0, r.stderr
    for n in names[:2]:
        assert taints(kube, n) == foreign
    assert taints(kube, names[2]) == other_value
    assert ctlenv.node(kube, names[2])["spec"].get("unschedulable")
    assert history(kube, names[0])[-1]["result"] == "released"
    again = cli(cfg, "reset", "--yes")
    assert again.returncode == 0 and "no node carries" in again.stdout


class _NoFleet:
    private_key = "/nonexistent/id_ed25519"
    known_hosts = "/nonexistent/known_hosts"


def test_cli_errors_are_one_line(kube, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("safety:\n  max_concurent: 3\n")
    for args in (
        ["status"],
        ["plan"],
        ["run", "--once"],
        ["release", "x"],
        ["reset", "--yes"],
        ["breaker", "status"],
        ["breaker", "reset", "--yes"],
    ):
        r = cli(bad, *args)
        assert r.returncode != 0
        assert r.stderr.startswith("fleetmedic: error: config ") and "max_concurent" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    cfg = ctlenv.write_config(tmp_path / "ok", kube, _NoFleet(), pool_name("cli"))
    r = cli(cfg, "run")
    assert r.returncode != 0 and "missing files: ansible.ssh_key" in r.stderr, r.stderr
    r = cli(cfg, "status")
    assert r.returncode == 0 and "no nodes" in r.stdout
    for args in (["breaker", "status"], ["breaker", "reset", "--yes"]):  # no pause ConfigMap
        r = cli(cfg, *args)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "not found" in r.stderr and "deploy/controller/configmap.yaml" in r.stderr, r.stderr


def test_run_once_climbs_an_unreachable_node_to_manual_and_exits(kube, tmp_path):
    """``run --once`` acts until nothing more can be done now, then exits; unreachable
    counts as failed at every step, and without SMTP the escalation is only recorded."""
    pool = pool_name("once")
    name = f"{pool}-0"
    kube.make_nodes(
        [name],
        labels={ctlenv.POOL_LABEL: pool, "fleetmedic.io/gpu-vendor": "nvidia"},
        addresses=["192.0.2.10"],  # TEST-NET-1: nobody answers there
        taints=[
            {
                "key": "gpu-healthcheck.aws-samples.io/unhealthy",
                "value": "true",
                "effect": "NoSchedule",
            }
        ],
    )
    key = tmp_path / "id_ed25519"
    key.write_text("not a key\n")

    class Keys:
        private_key = key
        known_hosts = key

    cfg = ctlenv.write_config(tmp_path / "ctl", kube, Keys(), pool)
    t0 = time.monotonic()
    r = cli(cfg, "run", "--once", timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    assert time.monotonic() - t0 < 300
    assert state_of(kube, name) == "manual"
    steps = [(a["step"], a["result"]) for a in history(kube, name)]
    assert steps == [
        ("reboot", "unreachable"),
        ("reimage", "unreachable"),
        ("manual", "escalated"),
    ], steps
    esc = annotation(kube, name, "fleetmedic.io/escalated")
    assert esc["sent"] and "no smtp" in esc.get("error", ""), esc
    assert "foreign signal: taint gpu-healthcheck.aws-samples.io/unhealthy" in r.stderr
