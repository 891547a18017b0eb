"""ladder.burnin: the opt-in burn-in gate, per pool through a profile's ladder."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetmedic.errors import ConfigError
from fleetmedic.model import config


def load(tmp_path: Path, text: str) -> config.Config:
    path = tmp_path / "controller.yaml"
    path.write_text(text)
    return config.load(path)


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as exc:
        load(tmp_path, text)
    message = str(exc.value)
    assert "\n" not in message
    return message


POOLS = """
profiles:
  - name: training
    selector: pool=training
    ladder: {burnin: {enabled: true, timeouts: {reimage: 40m}}}
"""


def test_off_by_default_and_on_for_the_pool_that_asks(tmp_path):
    cfg = load(tmp_path, POOLS)
    assert cfg.ladder.burnin.enabled is False
    train = cfg.profile("training").ladder.burnin
    assert train.enabled is True and train.diag_level == 2
    # unset: a level-2 run (660 s + 120 s of logins) and the collective test, at least 20 min
    assert train.timeout_for("reboot") == 1200
    assert train.timeout_for("reimage") == 2400
    # the rest of the ladder is the top level's
    assert cfg.profile("training").ladder.reboot == cfg.ladder.reboot


def test_the_default_timeout_follows_the_level(tmp_path):
    cfg = load(tmp_path, "ladder:\n  burnin: {enabled: true, diag_level: 3}\n")
    assert cfg.ladder.burnin.timeout_for("reset") == 2760 + 120 + 300


def test_its_playbook_must_exist_only_when_on(tmp_path):
    books = tmp_path / "books"
    books.mkdir()
    off = load(tmp_path, f"ansible: {{playbook_dir: {books}}}\n")
    assert not any("burnin" in m for m in off.missing_files({}))
    on = load(tmp_path, f"ansible: {{playbook_dir: {books}}}\n{POOLS}")
    assert f"ladder.burnin.playbook: {books / 'burnin.yml'}" in on.missing_files({})


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("burnin: {enabled: true, timeout: 5m}",
         "timeout (300s) is shorter than a level-2 diag run and the collective test: at least "
         "1080s"),
        ("burnin: {timeouts: {reboot: 10m}}", "timeouts.reboot (600s) is shorter"),
        ("burnin: {timeouts: {replace: 1h}}", "no burn-in on replace (no verify ends it)"),
        ("burnin: {diag_level: 7}", "diag_level"),
        ("burnin: {enabled: maybe}", "enabled"),
        ("burnin: {timeouts: {rebot: 1h}}", "rebot"),
    ],
)  # fmt: skip
def test_bad_values_are_one_line(tmp_path, text, said):
    assert said in error_of(tmp_path, f"ladder:\n  {text}\n")
    # the same inside a pool's profile
    pool = f"profiles:\n  - name: p\n    selector: pool=p\n    ladder:\n      {text}\n"
    assert said in error_of(tmp_path, pool)
