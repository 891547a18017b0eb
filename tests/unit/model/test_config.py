"""The controller config: defaults, the example file, and one-line errors."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from fleetmedic.errors import ConfigError
from fleetmedic.model import config
from fleetmedic.model.config import parse_duration, quantity_of

EXAMPLE = resources.files("fleetmedic.data").joinpath("controller.example.yaml")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "controller.yaml"
    path.write_text(text)
    return path


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as exc:
        config.load(write(tmp_path, text))
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_empty_file_gives_documented_defaults(tmp_path):
    cfg = config.load(write(tmp_path, ""))
    assert cfg.smtp is None and not cfg.dry_run
    assert cfg.ladder.reboot.phases == ("diagnose", "drain", "reboot", "restore", "verify")
    assert cfg.ladder.reimage.phases[2] == "reinstall"
    assert cfg.vocabulary().reboot.key == "fleetmedic.io/repair"
    konduktor, aws, npd = cfg.foreign()
    assert (konduktor.kind, konduktor.key, konduktor.after_repair) == (
        "taint",
        "trainy.konduktor.ai/faulty",
        "clear",  # Konduktor never clears its own taint
    )
    assert (aws.key, aws.after_repair, dict(aws.severity_rungs)["RESET"]) == (
        "gpu-healthcheck.aws-samples.io/unhealthy",
        "wait-for-change",  # the AWS agent removes its taint on a pass
        "reset",
    )
    assert (npd.kind, npd.key, npd.value, npd.after_repair) == (
        "condition",
        "GPUProblem",
        "True",
        "wait-for-change",
    )


def test_the_default_ladder_is_diagnose_reset_reboot_reimage_manual(tmp_path):
    cfg = config.load(write(tmp_path, ""))
    assert cfg.ladder.order == ("diagnose", "reset", "reboot", "reimage", "manual")
    assert cfg.ladder.first_repair() == "reset"
    # the diagnose state: GPU pods off, the vendor diagnostics, the checks; no evidence
    # capture (its `diagnose` phase is not the diagnose state's `diagnostics`)
    assert cfg.ladder.diagnose.phases == ("drain_gpu", "diagnostics", "verify")
    assert cfg.ladder.diagnose_level == 2
    assert cfg.ladder.playbooks.diagnostics.playbook == "quarantine.yml"
    assert cfg.ladder.reset.phases == ("diagnose", "drain_gpu", "reset", "restore", "verify")
    assert cfg.vocabulary().reset.as_taint() == {
        "key": "fleetmedic.io/repair",
        "value": "reset",
        "effect": "NoSchedule",
    }


def test_only_the_playbooks_of_configured_rungs_must_exist(tmp_path):
    books = tmp_path / "pb"
    books.mkdir()
    for name in ("diagnose", "reset", "reboot", "reimage", "restore", "verify"):
        (books / f"{name}.yml").write_text("[]\n")
    cfg = config.load(write(tmp_path, f"ansible: {{playbook_dir: {books}}}"))
    # the diagnose rung's diagnostics run the quarantine's playbook; the lemon rule (on by
    # default) its RMA case's
    assert [m for m in cfg.missing_files() if m.startswith("ladder.")] == [
        f"ladder.playbooks.diagnostics: {books / 'quarantine.yml'}",
        f"ladder.lemon.rma.playbook: {books / 'rma_case.yml'}",
    ]
    (books / "quarantine.yml").write_text("[]\n")
    (books / "rma_case.yml").write_text("[]\n")
    assert [m for m in cfg.missing_files() if m.startswith("ladder.")] == []
    cfg = config.load(
        write(
            tmp_path,
            f"ansible: {{playbook_dir: {books}}}\n"
            "ladder: {order: [reboot, power_cycle, reimage, manual]}\n"
            "bmc: {username: admin, password_file: bmc-password}",
        )
    )
    assert [m for m in cfg.missing_files() if m.startswith("ladder.")] == [
        f"ladder.playbooks.power_cycle: {books}/power_cycle.yml"
    ]


def test_every_field_says_why():
    undocumented = []
    models = [config.Config]
    while models:
        model = models.pop()
        docs = config.types.field_docs(model)
        for name, field in model.model_fields.items():
            sub = [
                a
                for a in (*getattr(field.annotation, "__args__", ()), field.annotation)
                if isinstance(a, type) and issubclass(a, config.types.Section)
            ]
            models += sub
            if (
                not sub
                and not (field.description or docs.get(name))
                and name
                not in {
                    "password",
                    "key",
                    "value",
                    "port",
                    "enabled",
                    "namespace",
                    "lease_name",
                    "window",
                }
            ):
                undocumented.append(f"{model.__name__}.{name}")
    assert not undocumented


def test_example_file_is_valid_and_says_what_it_sets():
    cfg = config.load(EXAMPLE)
    assert cfg.smtp.password_credential == "smtp-password"
    assert cfg.smtp.sender == "fleetmedic@example.com"
    assert cfg.ansible.ssh_key_credential == "ssh-key"


def test_ossci_preset_and_overrides(tmp_path):
    cfg = config.load(
        write(
            tmp_path,
            "taints:\n  preset: ossci\n  manual: {key: example.com/hands, value: needed}\n",
        )
    )
    vocab = cfg.vocabulary()
    assert vocab.reboot.key == "repair-reboot" and vocab.manual.key == "example.com/hands"


def test_relative_paths_are_relative_to_the_file(tmp_path):
    cfg = config.load(write(tmp_path, "ansible: {playbook_dir: pb, run_dir: /abs}\n"))
    assert cfg.ansible.playbook_dir == tmp_path / "pb"
    assert cfg.ansible.run_dir == Path("/abs")
    assert cfg.playbook_path(cfg.ladder.playbooks.reboot) == tmp_path / "pb" / "reboot.yml"


@pytest.mark.parametrize(
    "text,expected",
    [
        ("smtp: {port: 0, to: [a@example.test]}", "smtp.port: must be 1..65535, got 0"),
        (
            "smtp: {password: hunter2, to: [a@example.test]}",
            "smtp.password: never put the password in the config file",
        ),
        (
            "smtp: {to: [a@example.test], user: bob}",
            "neither password_file nor password_credential",
        ),
        ("smtp: {prot: 25, to: [a@example.test]}", "smtp.prot: unknown key (did you mean 'port'?)"),
        (
            "smtp: {tls: maybe, to: [a@example.test]}",
            "smtp.tls: input should be 'none', 'starttls' or 'ssl'",
        ),
        ("smtp: {}", "smtp.to: required"),
        ("safety: {min_healthy: 120%}", "safety.min_healthy: must be a count"),
        (
            "safety: {max_concurrent: 0}",
            "safety.max_concurrent: input should be greater than or equal to 1, got 0",
        ),
        ("safety: {breaker: {window: soon}}", "safety.breaker.window: must be a duration like"),
        ("safety: {drain: {pdb_blocked: ignore}}", "safety.drain.pdb_blocked: input should be"),
        (
            "safety: {maintenance_windows: [{start: '02:00', end: '04:00', timezone: Mars/Base}]}",
            "safety.maintenance_windows.0.timezone: unknown time zone 'Mars/Base'",
        ),
        (
            "ladder: {reboot: {phases: [reboot]}}",
            "ladder.reboot.phases: must be distinct phases ending in verify",
        ),
        (
            "ladder: {reboot: {phases: [reboot, fix, verify]}}",
            "ladder.reboot.phases.1: input should be",
        ),
        (
            "ladder: {order: [reboot, reset, manual]}",
            "ladder.order: must be distinct rungs in the order diagnose, reset, reboot, "
            "power_cycle, reimage, replace, manual, ending in manual, "
            "got ['reboot', 'reset', 'manual']",
        ),
        (
            "ladder: {replace: {phases: [diagnose, drain, replace]}}",
            "ladder.replace.phases: must be distinct phases ending in verify (or in notify, "
            "replace)",
        ),
        (
            "ladder: {reboot: {phases: [diagnose, drain, notify, replace]}}",
            "ladder: reboot: its phases must end in verify",
        ),
        (
            "ladder: {replace: {phases: [drain, reboot, verify]}}",
            "ladder: replace: its phases must end in notify, replace",
        ),
        ("cloud: {replace_via: karpenter}", "cloud.replace_via: input should be"),
        ("ladder: {replace_manual: true}", "ladder: replace_manual needs the replace rung"),
        ("ladder: {order: [reset, reboot]}", "ending in manual, got ['reset', 'reboot']"),
        ("ladder: {order: [reboot, rebooot, manual]}", "ladder.order.1: input should be"),
        ("taints: {preset: nope}", "taints.preset: must be one of default, ossci, got 'nope'"),
        ("taints: {reboot: {key: 'has space'}}", "taints.reboot.key: must be a valid taint key"),
        (
            "taints: {reboot: {key: fleetmedic.io/repair, value: reimage}}",
            "must be distinct taints",
        ),
        (
            "ansible: {extra_ssh_args: ['-o', 'StrictHostKeyChecking=no']}",
            "ansible: extra_ssh_args must not change host key checking",
        ),
        (
            "ansible: {env: {ANSIBLE_HOST_KEY_CHECKING: 'False'}}",
            "ansible: env: ANSIBLE_HOST_KEY_CHECKING='False' would trust any host key",
        ),
        (
            "ansible: {env: {ANSIBLE_SSH_ARGS: '-o UserKnownHostsFile=/dev/null'}}",
            "ansible: env: ANSIBLE_SSH_ARGS must not change host key checking",
        ),
        (
            "ansible: {env: {ANSIBLE_STRATEGY: mitogen_linear}}",
            "ansible: env: ANSIBLE_STRATEGY='mitogen_linear': Mitogen is not supported",
        ),
        (
            "leader_election: {renew_deadline: 5m}",
            "need retry_period < renew_deadline < lease_duration",
        ),
        (
            "foreign_signals: [{kind: annotation, key: x}]",
            "foreign_signals.0.kind: input should be",
        ),
        ("metrics: {port: http}", "metrics.port: input should be a valid integer"),
        ("- just a list", "must be a mapping at the top level"),
        ("smtp: [unclosed", "line 1 column"),
    ],
)
def test_one_line_errors_name_the_file_and_the_field(tmp_path, text, expected):
    message = error_of(tmp_path, text)
    assert message.startswith(f"config {tmp_path / 'controller.yaml'}: ")
    assert expected in message


def test_missing_file():
    with pytest.raises(ConfigError, match=r"^config /nonexistent.yaml: not found"):
        config.load("/nonexistent.yaml")


def test_secrets_by_systemd_credential(tmp_path):
    cfg = config.parse(
        {
            "smtp": {"to": ["a@example.test"], "user": "u", "password_credential": "smtp"},
            "ansible": {"playbook_dir": str(tmp_path)},
        }
    )
    assert config.secret_path(
        cfg.smtp.password_file,
        cfg.smtp.password_credential,
        {"CREDENTIALS_DIRECTORY": "/run/credentials/x"},
    ) == Path("/run/credentials/x/smtp")
    with pytest.raises(ConfigError, match="CREDENTIALS_DIRECTORY is not set"):
        config.secret_path(None, "smtp", {})
    missing = cfg.missing_files({"CREDENTIALS_DIRECTORY": str(tmp_path)})
    assert f"smtp.password: {tmp_path}/smtp" in missing
    assert f"ladder.playbooks.reboot: {tmp_path}/reboot.yml" in missing


def test_password_never_shows_in_repr_or_dump(tmp_path):
    cfg = config.parse({"smtp": {"to": ["a@example.test"]}})
    assert "password=" not in repr(cfg.smtp).replace("password_file", "").replace(
        "password_credential", ""
    )
    assert "password" not in cfg.smtp.model_dump()


@pytest.mark.parametrize(
    "text,seconds",
    [(30, 30), ("90s", 90), ("10m", 600), ("1h30m", 5400), ("7d", 604800), ("2.5", 2.5)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "10x", "-5", 0, True, None, "m"])
def test_bad_durations(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_quantities():
    assert quantity_of(3, 100, round_up=True) == 3
    assert quantity_of("50%", 5, round_up=True) == 3
    assert quantity_of("50%", 5, round_up=False) == 2


def test_a_loki_source_is_configured_in_the_controllers_yaml(tmp_path):
    assert config.load(write(tmp_path, "")).sources.loki is None, "off unless configured"
    cfg = config.load(
        write(
            tmp_path,
            "sources:\n  loki:\n    endpoint: http://loki:3100\n    poll_interval: 5s\n"
            "    kernel_queries: ['{job=\"dmesg\"}']\n",
        )
    )
    assert cfg.sources.loki.endpoint == "http://loki:3100"
    assert (cfg.sources.loki.poll_interval, cfg.sources.loki.lookback) == (5, 3600)
    assert cfg.sources.loki.kernel_queries == ('{job="dmesg"}',)
    assert "sources.loki.endpoint" in error_of(tmp_path, "sources:\n  loki:\n    endpoint: loki\n")
    assert "lookbak" in error_of(tmp_path, "sources:\n  loki:\n    lookbak: 1h\n")
    assert cfg.sources.loki.mode == "tail", "the websocket tail unless told to poll"
    polling = config.load(write(tmp_path, "sources:\n  loki:\n    mode: poll\n"))
    assert polling.sources.loki.mode == "poll"
    assert "sources.loki.mode" in error_of(tmp_path, "sources:\n  loki:\n    mode: push\n")


CLUSTERS = """
kube: {label_selector: gpu=true}
ansible: {run_dir: /var/lib/fm/runs, evidence_dir: /var/lib/fm/evidence}
safety: {max_concurrent: 3}
clusters:
  - name: us-east
    kube: {kubeconfig: us.kubeconfig}
  - name: eu-west
    kube: {kubeconfig: eu.kubeconfig, context: gpu}
    safety: {max_concurrent: 1}
    profiles: [{name: train, selector: pool=train}]
"""


def test_each_cluster_has_its_own_effective_config(tmp_path):
    cfg = config.load(write(tmp_path, CLUSTERS))
    assert cfg.cluster_names() == ("us-east", "eu-west") and cfg.cluster_name is None
    us, eu = cfg.cluster("us-east"), cfg.cluster("eu-west")
    assert (us.cluster_name, us.kube.kubeconfig, us.kube.label_selector) == (
        "us-east",
        tmp_path / "us.kubeconfig",
        "gpu=true",
    )
    assert (eu.kube.context, eu.safety.max_concurrent, us.safety.max_concurrent) == ("gpu", 1, 3)
    # two clusters may both have a node-17: their runs and evidence never mix
    assert us.ansible.run_dir == Path("/var/lib/fm/runs/us-east")
    assert eu.ansible.evidence_dir == Path("/var/lib/fm/evidence/eu-west")
    assert not us.clusters and us.cluster_names() == ()
    assert us.profile_names() == ("default",) and eu.profile("train").cluster_name == "eu-west"
    assert us.bmc is None, "nothing asked for a BMC"


def test_a_cluster_may_bring_its_own_bmc_settings(tmp_path):
    (tmp_path / "pw").write_text("secret\n")
    text = (
        "clusters:\n  - {name: a, kube: {}}\n"
        "  - name: b\n    kube: {}\n"
        "    bmc: {address_key: example.com/bmc, username: admin, password_file: pw}\n"
    )
    cfg = config.load(write(tmp_path, text))
    assert cfg.cluster("a").bmc is None and cfg.cluster("b").bmc is not None


def test_cluster_errors_are_one_line(tmp_path):
    dup = "clusters:\n  - {name: a, kube: {}}\n  - {name: a, kube: {}}\n"
    assert "'a' is used twice" in error_of(tmp_path, dup)
    bad = "clusters:\n  - {name: a, kube: {kubeconfg: x}}\n"
    assert "clusters.0 (a)" in error_of(tmp_path, bad) and "kubeconfg" in error_of(tmp_path, bad)
    with pytest.raises(ConfigError, match=r"no cluster 'b' \(known: a\)"):
        config.load(write(tmp_path, "clusters:\n  - {name: a, kube: {}}\n")).cluster("b")


def test_diagnostics_timeouts_fit_their_level(tmp_path):
    # left unset, the diagnose state's timeout follows its level (a level-3 run is 46 min)
    cfg = config.load(write(tmp_path, "ladder:\n  diagnose_level: 3\n"))
    assert cfg.ladder.playbooks.diagnostics.timeout == 2760 + 120
    assert config.load(write(tmp_path, "")).ladder.playbooks.diagnostics.timeout == 1200
    # set too short, it is a config error that names the key and the minimum
    short = "ladder:\n  playbooks:\n    diagnostics: {playbook: quarantine.yml, timeout: 600}\n"
    assert "diagnostics.timeout (600s)" in error_of(tmp_path, short)
    assert "at least 780s" in error_of(tmp_path, short)
    deep = config.load(write(tmp_path, "ladder:\n  quarantine: {level: 4}\n"))
    assert deep.ladder.quarantine.timeout == 7260 + 120
    deep_short = "ladder:\n  quarantine: {level: 4, timeout: 1h}\n"
    assert "quarantine.timeout (3600s) is shorter than a level-4 run" in error_of(
        tmp_path, deep_short
    )
    assert "at least 7380s" in error_of(tmp_path, deep_short)
