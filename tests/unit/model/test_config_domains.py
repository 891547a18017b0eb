"""The ``domains:`` section: defaults, what is accepted, and one-line errors for bad values."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fleetmedic.errors import ConfigError
from fleetmedic.model import config

CLIQUE = "nvidia.com/gpu.clique"


def load(tmp_path: Path, data: dict) -> config.Config:
    path = tmp_path / "controller.yaml"
    path.write_text(yaml.safe_dump(data))
    return config.load(path)


def error_of(tmp_path: Path, data: dict) -> str:
    with pytest.raises(ConfigError) as exc:
        load(tmp_path, data)
    message = str(exc.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_unset_means_no_domains(tmp_path):
    assert load(tmp_path, {}).domains == ()


def test_a_domain_with_its_documented_defaults(tmp_path):
    [d] = load(tmp_path, {"domains": [{"key": CLIQUE}]}).domains
    assert (d.key, d.threshold, d.window, d.settle, d.action) == (CLIQUE, 3, 600, 60, "hold")
    assert d.release_after is None and d.to == () and d.targets == ()


def test_percent_threshold_durations_recipients_and_targets(tmp_path):
    cfg = load(
        tmp_path,
        {
            "smtp": {"to": ["oncall@example.com"]},
            "notify": {"targets": [{"name": "dc", "url": "json://localhost:9/x"}]},
            "domains": [
                {
                    "key": "example.com/rack",
                    "threshold": "25 %",
                    "window": "2m",
                    "settle": "30s",
                    "release_after": "4h",
                    "to": ["dc-ops@example.com"],
                    "targets": ["dc"],
                }
            ],
        },
    )
    [d] = cfg.domains
    assert (d.threshold, d.window, d.settle, d.release_after) == ("25%", 120, 30, 14400)
    assert d.to == ("dc-ops@example.com",) and d.targets == ("dc",)


@pytest.mark.parametrize(
    ("domain", "expected"),
    [
        (
            {"key": CLIQUE, "threshold": 1},
            "domains.0.threshold: must be at least 2 nodes",
        ),
        (
            {"key": CLIQUE, "threshold": "150%"},
            "domains.0.threshold: must be a count (e.g. 3) or a percentage",
        ),
        ({"key": "not a label key!"}, "domains.0.key: must be a valid taint key"),
        (
            {"key": CLIQUE, "action": "reboot-all"},
            "domains.0.action: must be hold or {playbook: NAME.yml, timeout: DURATION}",
        ),
        (
            {"key": CLIQUE, "action": {"playbook": "fm.yml", "timeout": "soon"}},
            "domains.0.action: timeout: must be a duration",
        ),
        (
            {"key": CLIQUE, "action": {"playbook": "fm.yml", "retries": 2}},
            "domains.0.action: retries: unknown key",
        ),
        ({"key": CLIQUE, "window": "soon"}, "domains.0.window: must be a duration"),
        ({"key": CLIQUE, "treshold": 3}, "domains.0.treshold: unknown key (did you mean"),
        ({"key": CLIQUE, "targets": ["nowhere"]}, "'nowhere' is not one of notify.targets"),
        ({"key": CLIQUE, "to": ["dc@example.com"]}, "there is no `smtp:` section"),
    ],
)
def test_bad_values_are_one_line_errors(tmp_path, domain, expected):
    message = error_of(tmp_path, {"domains": [domain]})
    assert expected in message, message
    assert message.startswith(f"config {tmp_path}/controller.yaml: ")


def test_a_key_twice_is_refused(tmp_path):
    message = error_of(tmp_path, {"domains": [{"key": CLIQUE}, {"key": CLIQUE, "threshold": 5}]})
    assert f"domains: the key '{CLIQUE}' is listed twice" in message, message


def test_domains_are_fleet_wide_not_per_profile(tmp_path):
    # a profile's own notify targets do not have to name the domain's chat target
    cfg = load(
        tmp_path,
        {
            "notify": {"targets": [{"name": "dc", "url": "json://localhost:9/x"}]},
            "domains": [{"key": CLIQUE, "targets": ["dc"]}],
            "profiles": [{"name": "train", "selector": "pool=train", "notify": {"targets": []}}],
        },
    )
    assert cfg.domains[0].targets == ("dc",)
    with pytest.raises(ConfigError, match=r"profiles\.0\.domains: unknown key"):
        load(
            tmp_path,
            {"profiles": [{"name": "train", "selector": "pool=train", "domains": []}]},
        )


@pytest.mark.parametrize(
    ("domains", "expected"),
    [
        ([{"key": CLIQUE, "threshold": 1}], "domains.0.threshold: must be at least 2 nodes"),
        ([{"key": CLIQUE, "window": "-5m"}], "domains.0.window: must be a duration"),
        ([{"key": CLIQUE}, {"key": CLIQUE}], "the key 'nvidia.com/gpu.clique' is listed twice"),
    ],
)
def test_config_check_says_a_bad_domains_value_in_one_line(tmp_path, domains, expected):
    from tests.unit.cli.test_config_check import fleetmedic, good, write

    r = fleetmedic(
        "config", "check", "--config", str(write(tmp_path, {**good(tmp_path), "domains": domains}))
    )
    assert r.returncode == 2, (r.stdout, r.stderr)
    [line] = r.stderr.strip().splitlines()
    assert expected in line and "Traceback" not in r.stderr, line


def test_a_playbook_action_has_the_ladder_playbooks_shape(tmp_path):
    [d] = load(
        tmp_path,
        {"domains": [{"key": CLIQUE, "action": {"playbook": "fm.yml", "timeout": "30m"}}]},
    ).domains
    assert d.playbook is not None and (d.playbook.playbook, d.playbook.timeout) == ("fm.yml", 1800)
    [hold] = load(tmp_path, {"domains": [{"key": CLIQUE}]}).domains
    assert hold.playbook is None


def test_a_domain_playbook_that_is_not_there_is_one_line_of_config_check(tmp_path):
    from tests.unit.cli.test_config_check import fleetmedic, good, write

    there = {"key": CLIQUE, "action": {"playbook": "domain_restart_services.yml"}}
    ok = fleetmedic(
        "config", "check", "--config", str(write(tmp_path, {**good(tmp_path), "domains": [there]}))
    )
    assert (ok.returncode, ok.stderr) == (0, ""), ok.stderr
    gone = {"key": CLIQUE, "action": {"playbook": "no-such-domain-playbook.yml"}}
    r = fleetmedic(
        "config", "check", "--config", str(write(tmp_path, {**good(tmp_path), "domains": [gone]}))
    )
    assert r.returncode == 2, (r.stdout, r.stderr)
    [line] = r.stderr.strip().splitlines()
    assert "missing file: domains.0.action.playbook: " in line, line
    assert line.endswith("no-such-domain-playbook.yml"), line
