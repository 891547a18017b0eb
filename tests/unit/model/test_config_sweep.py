"""The `sweep:` section: validated like every other, overridable per profile."""

from __future__ import annotations

import pytest

from fleetmedic.errors import ConfigError
from fleetmedic.model.config import parse

BASE = {"ansible": {"playbook_dir": "/pb"}}


def test_defaults_and_durations():
    cfg = parse(
        {**BASE, "sweep": {"every": "12h", "windows": [{"start": "01:00", "end": "05:00"}]}}
    )
    assert cfg.sweep is not None
    assert (cfg.sweep.every, cfg.sweep.level, cfg.sweep.max_concurrent) == (43200, 2, 1)
    assert cfg.sweeps() and not parse(BASE).sweeps()
    assert "sweep.playbook: /pb/sweep.yml" in cfg.missing_files()


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        ({"level": 6}, "sweep.level: input should be less than or equal to 5"),
        ({"every": "30s"}, "sweep.every: input should be greater than or equal to 60"),
        ({"max_concurrent": 0}, "sweep.max_concurrent"),
        ({"windows": [{"start": "25:00", "end": "01:00"}]}, "sweep.windows.0.start"),
        ({"evry": "6h"}, "sweep.evry: unknown key (did you mean 'every'?)"),
    ],
)
def test_bad_values_are_one_line(sweep, message):
    with pytest.raises(ConfigError, match=r"^config: ") as err:
        parse({**BASE, "sweep": sweep})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_profile_overrides_or_opts_out():
    cfg = parse(
        {
            **BASE,
            "sweep": {"max_concurrent": 2},
            "profiles": [
                {"name": "train", "selector": "pool=train", "sweep": {"enabled": False}},
                {"name": "infer", "selector": "pool=infer", "sweep": {"level": 1}},
            ],
        }
    )
    train, infer = cfg.profile("train").sweep, cfg.profile("infer").sweep
    assert train is not None and not train.enabled
    assert infer is not None and (infer.level, infer.max_concurrent) == (1, 2)
    only = parse({**BASE, "profiles": [{"name": "a", "selector": "p=a", "sweep": {}}]})
    assert only.sweep is None and only.sweeps()
    with pytest.raises(ConfigError, match=r"profiles.0 \(a\): sweep.level"):
        parse({**BASE, "profiles": [{"name": "a", "selector": "p=a", "sweep": {"level": 0}}]})


def test_the_maintenance_taint_can_be_renamed_but_not_onto_another():
    cfg = parse({**BASE, "taints": {"maintenance": {"key": "example.com/sweep", "value": "on"}}})
    assert cfg.vocabulary().maintenance.key == "example.com/sweep"
    with pytest.raises(ConfigError, match="must be distinct taints"):
        parse(
            {
                **BASE,
                "taints": {"maintenance": {"key": "fleetmedic.io/slow-network", "value": "true"}},
            }
        )
