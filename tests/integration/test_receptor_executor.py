"""The receptor executor (fleetmedic.adapters.receptor through runner.run_playbook) on the
real test mesh: the same per-host outcomes as a local run, units released after their
results are read, and a lost execution node as an unknown (unreachable) outcome that
names it; with ``direct_results`` too (results read straight from the execution node,
the request signed with the work-signing key)."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from fleetmedic.adapters import runner
from fleetmedic.model.config import AnsibleConfig, ReceptorConfig
from tests.harness import loadscale
from tests.harness.fleet import ROOT
from tests.harness.mesh import two_shares

pytestmark = [pytest.mark.slow]

PLAY = [
    {
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {
                "name": "Read the hostname",
                "ansible.builtin.command": "hostname",
                "changed_when": False,
            },
            {
                "name": "Check the GPUs",
                "ansible.builtin.fail": {"msg": "Xid 79 on GPU 3"},
                "when": "inventory_hostname == 'node-2'",
            },
        ],
    }
]
SLOW = [
    {
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {"name": "Take a while", "ansible.builtin.command": "sleep 40", "changed_when": False}
        ],
    }
]


@pytest.fixture
def settings(fleet, tmp_path) -> AnsibleConfig:
    return AnsibleConfig(
        playbook_dir=ROOT / "playbooks",
        config_file=ROOT / "ansible.cfg",
        run_dir=tmp_path / "runs",
        evidence_dir=tmp_path / "evidence",
        ssh_key_file=fleet.private_key,
        known_hosts_file=fleet.known_hosts,
        remote_user="root",
        job_timeout=300,
    )


def _via(mesh, node: str, **kw) -> runner.Via:
    s = mesh.settings()
    return runner.Via(node, ReceptorConfig(socket=s["socket"], tls_client=s["tls_client"], **kw))


def _direct(mesh, node: str, key=None, **kw) -> runner.Via:
    """direct_results as the config accepts it on stock Receptor: one unit at a time."""
    key = key or mesh.tls.work_signing_key
    return _via(mesh, node, direct_results=True, signing_key=key, **{"max_in_flight": 1, **kw})


def _targets(fleet, *indexes):
    return [runner.Target(fleet.node(i).name, fleet.node(i).address) for i in indexes]


def _released(mesh, timeout: float = 20) -> None:
    """No unit left anywhere (a remote release completes once the execution node has
    confirmed it, a moment after ``work release`` returns)."""
    empty = {"controller": [], "exec-1": [], "exec-2": []}
    deadline = time.monotonic() + timeout
    while mesh.work_units() or mesh.unit_dirs() != empty:
        assert time.monotonic() < deadline, (mesh.work_units(), mesh.unit_dirs())
        time.sleep(0.1)


def test_same_outcomes_as_local_and_units_released(mesh, fleet, settings):
    local = runner.run_playbook(PLAY, _targets(fleet, 2, 3), settings, timeout=120)
    remote = runner.run_playbook(
        PLAY, _targets(fleet, 2, 3), settings, timeout=120, via=_via(mesh, "exec-2")
    )
    assert remote.executor == "exec-2" and local.executor == "local"
    assert remote.hosts == local.hosts
    assert remote.hosts["node-3"] == runner.HostResult("ok", stdout="node-3")
    assert (remote.hosts["node-2"].task, remote.hosts["node-2"].message) == (
        "Check the GPUs",
        "Xid 79 on GPU 3",
    )
    assert (remote.artifact_dir / "rc").read_text().strip() == str(remote.rc) == "2"
    probe = runner.read_boot_ids(_targets(fleet, 1), settings, via=_via(mesh, "exec-1"))
    assert probe.hosts["node-1"].stdout == fleet.node(1).boot_id()
    _released(mesh)
    # exec-1 cannot reach node-2: unreachable, as a local run to a vanished node
    away = runner.run_playbook(
        PLAY, _targets(fleet, 2), settings, timeout=60, via=_via(mesh, "exec-1")
    )
    assert away.hosts["node-2"].status == "unreachable"
    _released(mesh)


def test_direct_results_same_outcomes_signed_and_released(mesh, fleet, settings, caplog):
    """Straight from exec-2 with the mesh's signing key; with a key exec-2 does not trust
    it refuses the request and the run reads through our node: the same outcomes either
    way, no unit left, and neither the key nor a signature in the log or run dirs."""
    rx = "fleetmedic.adapters.receptor"
    caplog.set_level(logging.DEBUG, logger=rx)
    want = runner.run_playbook(PLAY, _targets(fleet, 2, 3), settings, timeout=120).hosts
    direct = runner.run_playbook(
        PLAY, _targets(fleet, 2, 3), settings, timeout=120, via=_direct(mesh, "exec-2")
    )
    assert direct.hosts == want
    assert "results straight from exec-2" in caplog.text
    assert "refused" not in caplog.text
    _released(mesh)

    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key = settings.run_dir.parent / "stranger.pem"
    key.write_bytes(
        stranger.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    key.chmod(0o600)
    caplog.clear()
    fallback = runner.run_playbook(
        PLAY, _targets(fleet, 2), settings, timeout=60, via=_direct(mesh, "exec-2", key)
    )
    assert fallback.hosts == {"node-2": want["node-2"]}
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 1 and "could not verify signature" in refused[0], refused
    assert "results straight" not in caplog.text
    _released(mesh)
    secrets = [b"PRIVATE KEY", b"eyJhbGciOiJSUzUxMi"]  # a PEM key, a JWT's RS512 header
    secrets += [k.read_bytes().splitlines()[1] for k in (key, mesh.tls.work_signing_key)]
    assert not [s for s in secrets if s.decode() in caplog.text]
    files = [f for f in settings.run_dir.rglob("*") if f.is_file()]
    assert files and not [(f, s) for f in files for s in secrets if s in f.read_bytes()]


@pytest.mark.parametrize(
    "build",
    # Not here: stock Receptor, results read through the controller, 8 at a time. Receptor
    # 1.4.4 wedges a link when a packet reaches a closed dial (tests/receptor/patches); the
    # adapter makes that less likely, not impossible, so the case passed or failed by chance.
    # The upstream bug has its reproducer outside the suite, tests/receptor/wedge_repro.py
    # (``--mode direct --workers 8`` wedges stock within seconds; its docstring has the
    # figures); the suite keeps the cases that must never wedge.
    ["patched", "stock, direct_results"],
)
def test_many_units_in_flight_keep_the_mesh_up(
    build, mesh_factory, fleet, settings, patched_mesh_binaries, caplog
):
    """16 runs, 8 at a time, over both execution nodes: each ends as a local run does,
    and no mesh link goes idle. Stock Receptor 1.4.4 with the old adapter wedged the
    controller's links within seconds here; the patched build runs without a per-node
    cap (max_in_flight) and must never wedge. With
    direct_results on stock, the cap the config insists on (1 per node; 8 runs) holds
    it, every run read direct (at 2 per node a 100-run batch of bench/receptor_overhead.py
    wedged a link)."""
    extra = {"binaries": patched_mesh_binaries} if build == "patched" else {}
    mesh = mesh_factory(two_shares(fleet), **extra)
    want = runner.run_playbook(PLAY, _targets(fleet, 1, 2, 3), settings, timeout=120).hosts

    cap = {"max_in_flight": 8} if build == "patched" else {}  # stock: the default cap
    how = _direct if build == "stock, direct_results" else _via
    caplog.set_level(logging.DEBUG, logger="fleetmedic.adapters.receptor")

    def one(i: int) -> runner.RunResult:
        n = 1 + i % 3
        via = how(mesh, mesh.executor_for(fleet.node(n).name).id, lost_after=10, **cap)
        # the timeout bounds the wait for a slot too: at stock's cap of 1, exec-2's fifth
        # run waits for four (past 60 s at load 20); the wait stretches with the load
        timeout = loadscale.scaled(60)
        return runner.run_playbook(PLAY, _targets(fleet, n), settings, timeout=timeout, via=via)

    with ThreadPoolExecutor(8) as pool:
        runs = list(pool.map(one, range(8 if how is _direct else 16)))
    for r in runs:
        ((name, host),) = r.hosts.items()
        assert host == want[name], (r.executor, r.run_id, host)
    if how is _direct:
        assert caplog.text.count("results straight from") == len(runs), caplog.text[-2000:]
    logs = [mesh.controller_log, *(ex.log for ex in mesh.exec_nodes)]
    assert not [ln for f in logs for ln in f.read_text().splitlines() if "Timing out" in ln]
    _released(mesh)


def _start(fn) -> tuple[threading.Thread, dict]:
    out: dict = {}
    t = threading.Thread(target=lambda: out.update(r=fn()), daemon=True)
    t.start()
    return t, out


def _wait_running(mesh, run: tuple[threading.Thread, dict] | None = None, timeout=60) -> None:
    """Until the controller's node shows a unit Running. ``run`` (a :func:`_start`): one
    that ended first fails here with its result (a unit that never ran shows nothing)."""
    deadline = loadscale.Deadline(timeout)
    while not any(u.get("StateName") == "Running" for u in mesh.work_units().values()):
        if run is not None:
            assert run[0].is_alive(), f"the run ended before its unit ran: {run[1].get('r')}"
        assert not deadline.passed(), f"no unit Running: {mesh.work_units()}"
        time.sleep(0.1)


@pytest.mark.parametrize(
    ("fault", "direct"),
    [("killed", False), ("cut", False), ("silent", False), ("killed", True), ("cut", True)],
)
def test_lost_execution_node_is_an_unknown_outcome_naming_it(
    mesh_factory, patched_mesh_binaries, fleet, settings, fault, direct
):
    """The loss is ours to make: direct_results on the patched build. Seen in CI
    (2026-11-30): on stock Receptor 1.4.4 at one unit in flight, the direct read wedged
    the controller's link to exec-1 by itself (the dialed-connection race of
    tests/receptor/patches/UPSTREAM.md) before the unit was seen Running, so the fault
    under test was never made."""
    mesh = mesh_factory(
        two_shares(fleet), **({"binaries": patched_mesh_binaries} if direct else {})
    )
    how = _direct if direct else _via
    via = how(mesh, "exec-1", lost_after=2, grace=3, poll_interval=0.1)
    t0 = time.monotonic()
    t, out = _start(
        lambda: runner.run_playbook(SLOW, _targets(fleet, 1), settings, timeout=15, via=via)
    )
    _wait_running(mesh, (t, out))
    one = mesh.node("exec-1")
    {"killed": one.kill, "cut": one.cut_mesh, "silent": one.pause}[fault]()
    t.join(60)
    assert not t.is_alive()
    r = out["r"]
    host = r.hosts["node-1"]
    assert host.status == "unreachable" and r.status == "lost"
    assert host.message.startswith("execution node exec-1: "), host.message
    took = time.monotonic() - t0
    assert took < 15 + 3 + 10, (took, host.message)  # never past the timeout plus grace
    # the controller's own record of the unit is gone whatever the execution node's state
    deadline = time.monotonic() + 60  # a remote cancel waits for the lost node ~30 s
    while mesh.work_units():
        assert time.monotonic() < deadline, mesh.work_units()
        time.sleep(0.1)


def test_the_controller_repairs_through_the_mesh_and_a_lost_node_is_in_the_history(
    mesh, fleet, kube, tmp_path
):
    """`fleetmedic run` with `executor:` routing by a `site` label: a node at each site is
    repaired through its own execution node (units released after); then exec-1 dies in
    the middle of a run: the outcome is unknown, not a failure; when exec-1 is back the
    phase is resumed as after a controller restart, and the history names exec-1."""
    from tests.harness import ctlenv
    from tests.harness.ctlbench import FAST_PLAY, fast_playbooks
    from tests.harness.ctlenv import ControllerProcess, history, wait_until

    pool = f"mx{uuid.uuid4().hex[:5]}"
    fault = [ctlenv.repair_taint("reboot")]
    a, b = f"{pool}-a", f"{pool}-b"
    for name, n, site in ((a, 1, "a"), (b, 2, "b")):
        kube.make_nodes(
            [name],
            labels={ctlenv.POOL_LABEL: pool, "fleetmedic.io/gpu-vendor": "nvidia", "site": site},
            addresses=[fleet.node(n).address],
            taints=fault,
        )
    books = fast_playbooks(tmp_path)
    once = f"/tmp/fm-slow-once-{pool}"  # the first verify is slow, the resumed one is not
    slow_once = {
        "name": "Take a while, the first time",
        "ansible.builtin.shell": f"test -e {once} || {{ touch {once}; sleep 40; }}",
        "changed_when": False,
    }
    slow = [{**FAST_PLAY[0], "tasks": [*FAST_PLAY[0]["tasks"], slow_once]}]
    (tmp_path / "fast-playbooks" / "slow-verify.yml").write_text(yaml.safe_dump(slow))
    s = mesh.settings()
    receptor = {"socket": s["socket"], "tls_client": s["tls_client"], "lost_after": 2, "grace": 3}
    cfg = ctlenv.write_config(
        tmp_path / "ctl",
        kube,
        fleet,
        pool,
        overrides={
            "ansible": {"playbook_dir": books, "forks": 5},
            "ladder": {"reboot": {"phases": ["drain", "verify"]}},
            "executor": {
                "receptor": receptor,
                "label": "site",
                "routes": {"a": "exec-1", "b": "exec-2"},
            },
        },
    )
    proc = ControllerProcess(cfg, tmp_path / "controller.log").start()
    try:

        def passed(name: str) -> bool:
            assert proc.alive, proc.tail(40)
            return [(x["step"], x["result"]) for x in history(kube, name)] == [("reboot", "pass")]

        wait_until(lambda: passed(a) and passed(b), 120, "both nodes repaired through the mesh")
        log = proc.log.read_text()
        for name, ex in ((a, "exec-1"), (b, "exec-2")):
            runs = [line for line in log.splitlines() if f"{name}: run " in line]
            assert any(f"({ex}): ok" in line for line in runs), (ex, runs)
        _released(mesh)
        proc.stop()

        # a verify that takes a while, and exec-1 dies while it runs
        slow_cfg = yaml.safe_load(cfg.read_text())
        # The lost phase is resumed until its own timeout, counted from the phase's start:
        # kill, loss detection, exec-1's restart and the resumed run must all fit in it.
        # 60 s did not under a loaded parallel suite (the resume ended `unreachable`).
        slow_cfg["ladder"]["playbooks"]["verify"] = {"playbook": "slow-verify.yml", "timeout": 180}
        cfg.write_text(yaml.safe_dump(slow_cfg))
        ctlenv.set_taints(kube, a, lambda t: [*t, *fault])
        proc = ControllerProcess(cfg, tmp_path / "controller-2.log").start()
        _wait_running(mesh)
        mesh.node("exec-1").kill()

        def events(reason: str) -> list[str]:
            items = kube.request(
                "GET", f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3D{a}"
            )["items"]
            return [e["message"] for e in items if e["reason"] == reason]

        wait_until(lambda: events("RepairRunLost"), 60, "the lost run recorded")
        assert "execution node exec-1" in events("RepairRunLost")[0]
        assert not [x for x in history(kube, a) if x["ep"] == 2], "not a failure: unknown"
        mesh.node("exec-1").start()  # back: the phase is resumed, as after a restart
        wait_until(lambda: len(history(kube, a)) == 2, 200, "the resumed verify passing")
        second = history(kube, a)[1]
        assert (second["ep"], second["step"], second["result"]) == (2, "reboot", "pass")
        assert "execution node exec-1" in second["message"], second
    finally:
        proc.stop()
        kube.delete_nodes([a, b])
