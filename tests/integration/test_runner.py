"""fleetmedic.adapters.runner against the real nspawn test fleet (real sshd, real reboots)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleetmedic.adapters import runner
from fleetmedic.errors import PermanentError
from fleetmedic.model.config import AnsibleConfig
from tests.harness.fleet import ROOT

pytestmark = pytest.mark.fleet


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


def targets(fleet, *indexes, **hostvars):
    return [runner.Target(fleet.node(i).name, fleet.node(i).address, hostvars) for i in indexes]


def test_per_host_outcome_run_id_and_fresh_private_data_dir(fleet, settings):
    play = [
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
    r = runner.run_playbook(play, targets(fleet, 1, 2), settings, timeout=120)
    assert r.hosts["node-1"] == runner.HostResult("ok", stdout="node-1")
    assert r.hosts["node-2"].status == "failed"
    assert (r.hosts["node-2"].task, r.hosts["node-2"].message) == (
        "Check the GPUs",
        "Xid 79 on GPU 3",
    )
    assert set(r.hosts) == {"node-1", "node-2"}, "only the targets are in the inventory"
    assert r.rc == 2 and r.artifact_dir.is_dir() and r.artifact_dir.name == r.run_id
    again = runner.run_playbook(play, targets(fleet, 1), settings, timeout=120)
    assert again.private_data_dir != r.private_data_dir


def test_host_key_checking_is_on(fleet, settings, tmp_path):
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    strict = settings.model_copy(update={"known_hosts_file": empty})
    r = runner.read_boot_ids(targets(fleet, 1), strict, timeout=60)
    assert r.hosts["node-1"].status == "unreachable"
    assert "host key verification failed" in r.hosts["node-1"].message.lower()


def test_unreachable_address_and_missing_address(fleet, settings):
    dead = fleet.node(1).address.rsplit(".", 1)[0] + ".250"  # on the fleet's bridge, no one there
    r = runner.read_boot_ids(
        [runner.Target("ghost", dead), runner.Target("nameless", None)], settings, timeout=120
    )
    assert r.hosts["ghost"].status == "unreachable"
    assert (
        r.hosts["nameless"].status == "unreachable" and "no address" in r.hosts["nameless"].message
    )


def test_job_timeout_is_a_timeout_not_a_pass(fleet, settings):
    play = [
        {
            "hosts": "all",
            "gather_facts": False,
            "tasks": [{"name": "Hang", "ansible.builtin.command": "sleep 60"}],
        }
    ]
    r = runner.run_playbook(play, targets(fleet, 3), settings, timeout=8)
    assert r.status == "timeout"
    assert r.hosts["node-3"].status == "timeout" and r.hosts["node-3"].task == "Hang"
    assert r.duration < 40


def test_evidence_fetched_into_the_evidence_dir_is_reported(fleet, settings):
    play = [
        {
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Fetch a bundle",
                    "ansible.builtin.fetch": {
                        "src": "/etc/hostname",
                        "flat": True,
                        "dest": "{{ lookup('ansible.builtin.env', 'FLEETMEDIC_EVIDENCE_DIR') }}/"
                        "{{ inventory_hostname }}/"
                        "{{ inventory_hostname }}-{{ fleetmedic_run_id }}.txt",
                    },
                }
            ],
        }
    ]
    r = runner.run_playbook(play, targets(fleet, 1), settings, timeout=120)
    [bundle] = r.hosts["node-1"].evidence
    assert Path(bundle).read_text().strip() == "node-1" and r.run_id in bundle
    assert runner.evidence_for("node-1", settings) == [bundle]
    assert runner.evidence_for("node-1", settings, episode=1) == []


def test_playbook_that_cannot_run_is_a_permanent_error(fleet, settings, tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text("- hosts: all\n  tasks:\n    - name: x\n      no.such.module: {}\n")
    with pytest.raises(PermanentError, match="failed before any task ran"):
        runner.run_playbook(broken, targets(fleet, 1), settings, timeout=60)


@pytest.mark.slow
def test_the_collections_reboot_playbook_really_reboots_once_per_request(fleet, settings):
    node = fleet.node(2)
    before = runner.read_boot_ids(targets(fleet, 2), settings).hosts[node.name].stdout
    assert before == node.boot_id()
    hostvars = {
        "fleetmedic_request_id": "e1-reboot1-test",
        "fleetmedic_collect_evidence": False,
        "reboot_verify": False,
        "fleetmedic_node_lease": False,
    }  # as the controller runs it
    r = runner.run_playbook(
        settings.playbook_dir / "reboot.yml", targets(fleet, 2, **hostvars), settings, timeout=300
    )
    assert r.hosts[node.name].ok, r.hosts[node.name]
    after = runner.read_boot_ids(targets(fleet, 2), settings).hosts[node.name].stdout
    assert after and after != before
    # the same request again (a controller restarted mid-phase): no second reboot
    r = runner.run_playbook(
        settings.playbook_dir / "reboot.yml", targets(fleet, 2, **hostvars), settings, timeout=300
    )
    assert r.hosts[node.name].ok
    assert runner.read_boot_ids(targets(fleet, 2), settings).hosts[node.name].stdout == after


def test_prune_keeps_the_newest_runs(fleet, settings):
    for _ in range(3):
        runner.read_boot_ids(targets(fleet, 1), settings)
    kept = settings.model_copy(update={"keep_runs": 1})
    newest = max(p.name for p in settings.run_dir.iterdir() if p.name != "cp")
    assert runner.prune_runs(kept) == 2
    assert [p.name for p in settings.run_dir.iterdir() if p.name != "cp"] == [newest]


def test_a_run_dir_too_deep_for_a_unix_socket_still_reaches_the_node(fleet, settings, tmp_path):
    """ssh's master socket must fit sun_path (108 bytes): a deep run_dir (one per cluster
    under a long state dir) gets a private control path dir in the temp dir instead."""
    deep = tmp_path / ("d" * 60) / "runs" / "a-cluster-with-a-long-name"
    assert len(str(deep / "cp")) + 28 > 107
    s = settings.model_copy(update={"run_dir": deep})
    cp = runner.control_path_dir(deep)
    assert cp != deep / "cp" and len(str(cp)) + 28 <= 107
    shallow = Path("/tmp") / "runs"  # (tmp_path is too deep under pytest-xdist's basetemp)
    assert runner.control_path_dir(shallow) == shallow / "cp"
    r = runner.read_boot_ids(targets(fleet, 1), s, timeout=60)
    assert r.hosts["node-1"].status == "ok", r.hosts["node-1"].message
    assert cp.is_dir() and cp.stat().st_mode & 0o777 == 0o700
    assert cp.stat().st_uid == os.getuid()
