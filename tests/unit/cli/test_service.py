"""``fleetmedic run``'s composition (fleetmedic/service.py): where the Loki source's endpoint
comes from, and a one-line error when there is none."""

from __future__ import annotations

import pytest
import yaml

from fleetmedic.errors import ConfigError
from fleetmedic.model import config
from fleetmedic.service import loki_endpoint


def cfg(text: str):
    return config.parse(yaml.safe_load(text), "controller.yaml")


def test_the_config_wins_and_log_endpoint_is_konduktors_fallback():
    assert loki_endpoint(cfg("sources: {loki: {endpoint: 'http://a:3100'}}"), {}) == "http://a:3100"
    assert (
        loki_endpoint(cfg("sources: {loki: {}}"), {"LOG_ENDPOINT": "http://localhost:3100"})
        == "http://localhost:3100"
    )


@pytest.mark.parametrize("env", [{}, {"LOG_ENDPOINT": "localhost:3100"}])
def test_no_usable_endpoint_is_one_line(env):
    with pytest.raises(ConfigError) as exc:
        loki_endpoint(cfg("sources: {loki: {}}"), env)
    assert "LOG_ENDPOINT" in str(exc.value) and "\n" not in str(exc.value)
