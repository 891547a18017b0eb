"""The bmc section: where a node's BMC address comes from, credentials as files only,
and what the power_cycle playbook is handed (paths, never a secret)."""

from __future__ import annotations

import json

import pytest

from fleetmedic.controller.execute import Executor
from fleetmedic.errors import ConfigError
from fleetmedic.model import config
from fleetmedic.model.config.bmc import valid_address
from fleetmedic.model.nodestate import view
from fleetmedic.policy.actions import Action, Kind

CREDS = {"username_credential": "bmc-user", "password_credential": "bmc-password"}
ORDER = {"order": ["reboot", "power_cycle", "reimage", "manual"]}


def parse(bmc: dict, **more) -> config.Config:
    return config.parse({"ladder": ORDER, "bmc": bmc, **more})


def test_a_ladder_with_power_cycle_needs_the_section():
    with pytest.raises(ConfigError) as exc:
        config.parse({"ladder": ORDER})
    assert str(exc.value) == (
        "config: ladder.order names power_cycle but there is no `bmc:` section "
        "(how to reach the nodes' BMCs)"
    )
    assert parse(CREDS).bmc is not None


def test_with_a_bmc_section_power_cycle_follows_reboot_by_default():
    assert parse_plain({}).ladder.order == ("diagnose", "reset", "reboot", "reimage", "manual")
    assert parse_plain({"bmc": CREDS}).ladder.order == (
        "diagnose",
        "reset",
        "reboot",
        "power_cycle",
        "reimage",
        "manual",
    )
    mine = parse_plain(
        {"bmc": CREDS, "ladder": {"order": ["reboot", "manual"], "probe_interval": 5}}
    )
    assert mine.ladder.order == ("reboot", "manual"), "an explicit order is kept"
    pool = parse_plain(
        {
            "bmc": CREDS,
            "profiles": [{"name": "p", "selector": "a=b", "ladder": {"probe_interval": 5}}],
        }
    )
    assert "power_cycle" in pool.profile("p").ladder.order


def parse_plain(data: dict) -> config.Config:
    return config.parse(data)


@pytest.mark.parametrize(
    ("bmc", "says"),
    [
        ({"username": "admin"}, "give password_file or password_credential"),
        ({"password_credential": "p"}, "exactly one of username, username_file"),
        ({**CREDS, "username": "admin"}, "(got username, username_credential)"),
        ({**CREDS, "password_file": "/p"}, "not both"),
        ({**CREDS, "password": "hunter2"}, "bmc.password: unknown key"),
        ({**CREDS, "address_from": "inventory"}, "needs `addresses` or `addresses_file`"),
        ({**CREDS, "addresses": {"n1": "10.0.0.1"}}, "only with address_from: inventory"),
        (
            {**CREDS, "address_from": "inventory", "addresses": {"n1": "{{ lookup('pipe') }}"}},
            "is not a host or host:port",
        ),
        ({**CREDS, "protocol": "snmp"}, "bmc.protocol"),
        ({**CREDS, "timeout": "10m"}, "bmc.timeout"),
    ],
)
def test_bad_sections_are_one_line(bmc, says):
    with pytest.raises(ConfigError) as exc:
        parse(bmc)
    assert says in str(exc.value) and "\n" not in str(exc.value)
    assert "hunter2" not in str(exc.value) or "unknown key" in str(exc.value)


@pytest.mark.parametrize(
    ("address", "ok"),
    [
        ("10.1.2.3", True),
        ("bmc-17.example.com", True),
        ("10.1.2.3:8443", True),
        ("[fd00::17]:443", True),
        ("https://10.1.2.3", False),
        ("admin@10.1.2.3", False),
        ("10.1.2.3/redfish", False),
        ("{{ x }}", False),
        ("", False),
    ],
)
def test_addresses_are_plain_hosts(address, ok):
    assert valid_address(address) is ok


def test_the_address_comes_from_the_one_place_chosen():
    labels = {"fleetmedic.io/bmc-address": "10.0.0.1"}
    annotations = {"example.com/bmc": "10.0.0.2:8443"}
    by_label = parse(CREDS).bmc
    assert by_label is not None
    assert by_label.address_for("n1", labels, annotations) == (
        "10.0.0.1",
        "label fleetmedic.io/bmc-address",
    )
    assert by_label.address_for("n1", {}, annotations) == (
        None,
        "no BMC address for n1 (looked in label fleetmedic.io/bmc-address)",
    )
    by_ann = parse({**CREDS, "address_from": "annotation", "address_key": "example.com/bmc"}).bmc
    assert by_ann is not None
    assert by_ann.address_for("n1", labels, annotations)[0] == "10.0.0.2:8443"
    bad = by_ann.address_for("n1", {}, {"example.com/bmc": "https://x/{{ y }}"})
    assert bad == (
        None,
        "BMC address of n1 in annotation example.com/bmc is not a host or host:port",
    )
    inv = parse({**CREDS, "address_from": "inventory", "addresses": {"n1": "10.0.0.3"}}).bmc
    assert inv is not None
    assert inv.address_for("n1", labels, annotations)[0] == "10.0.0.3"
    assert inv.address_for("n1", {}, {}, {"n1": "10.0.0.4"})[0] == "10.0.0.4", "the file wins"
    assert inv.address_for("n2", {}, {})[0] is None


def test_the_playbook_gets_paths_not_secrets(tmp_path):
    bmc = parse(CREDS).bmc
    assert bmc is not None
    env = {"CREDENTIALS_DIRECTORY": "/run/credentials/fleetmedic.service"}
    out = bmc.playbook_vars(env)
    assert out["fleetmedic_bmc_password_path"] == "/run/credentials/fleetmedic.service/bmc-password"
    assert out["fleetmedic_bmc_username_path"] == "/run/credentials/fleetmedic.service/bmc-user"
    assert out["power_cycle_bmc_timeout"] == 20 and out["power_cycle_off_seconds"] == 10
    with pytest.raises(ConfigError, match="CREDENTIALS_DIRECTORY is not set"):
        bmc.playbook_vars({})
    inline = parse({"username": "admin", "password_file": "pw"}, ansible={}).bmc
    assert inline is not None and inline.playbook_vars({})["fleetmedic_bmc_username"] == "admin"


def test_missing_credential_files_are_named_at_start(tmp_path):
    cfg = config.parse(
        {"ladder": ORDER, "bmc": {"username_file": "user", "password_file": "pw"}},
        base=tmp_path,
    )
    missing = cfg.missing_files()
    assert f"bmc.username: {tmp_path}/user" in missing
    assert f"bmc.password: {tmp_path}/pw" in missing
    no_rung = config.parse(
        {
            "ladder": {"order": ["reboot", "reimage", "manual"]},
            "bmc": {"username_file": "u", "password_file": "p"},
        },
        base=tmp_path,
    )
    assert not [m for m in no_rung.missing_files() if m.startswith("bmc.")]


def test_a_profile_may_have_its_own_bmcs():
    cfg = config.parse(
        {
            "ladder": ORDER,
            "bmc": CREDS,
            "profiles": [{"name": "old", "selector": "gen=1", "bmc": {"protocol": "ipmi"}}],
        }
    )
    assert cfg.profile("old").bmc.protocol == "ipmi"  # type: ignore[union-attr]
    assert cfg.bmc.protocol == "redfish"  # type: ignore[union-attr]


def run_action(profile: str = "default") -> Action:
    return Action(
        kind=Kind.RUN,
        node="n1",
        reason="power cycle",
        step="power_cycle",
        phase="power_cycle",
        playbook="/pb/power_cycle.yml",
        profile=profile,
    )


def test_the_executor_resolves_the_address_or_fails_the_phase_without_a_run(tmp_path):
    """The power_cycle phase gets the address and the credential paths; without an address
    it fails at once with one line (the ladder then climbs), and no playbook runs."""
    inventory = tmp_path / "bmcs.yaml"
    inventory.write_text(json.dumps({"n1": "10.9.0.1"}))
    cfg = parse(
        {
            "username_file": "/etc/fleetmedic/bmc-user",
            "password_file": "/etc/fleetmedic/bmc-pw",
            "address_from": "inventory",
            "addresses_file": str(inventory),
        }
    )
    ex = Executor(cfg, cluster=None)  # type: ignore[arg-type]
    node = {"metadata": {"name": "n1", "labels": {}, "annotations": {}}, "spec": {}}
    v = view(node, cfg.vocabulary(), ())
    got = ex._phase_vars(run_action(), v)
    assert isinstance(got, dict)
    assert got["fleetmedic_bmc_address"] == "10.9.0.1"
    assert got["fleetmedic_bmc_password_path"] == "/etc/fleetmedic/bmc-pw"
    inventory.write_text("{}")
    outcome = ex.execute(run_action(), v)
    assert (outcome.status, outcome.task) == ("failed", "bmc")
    assert outcome.message == "no BMC address for n1 (looked in the bmc inventory)"
    inventory.write_text("[1, 2]")
    assert "not a mapping" in str(ex._phase_vars(run_action(), v))
    other = Action(kind=Kind.RUN, node="n1", reason="r", phase="reboot", playbook="/pb/r.yml")
    assert ex._phase_vars(other, v) == {}
