"""`watch loki --endpoint` is checked before any connection, and never echoes a secret."""

from __future__ import annotations

import pytest

from fleetmedic.agent.lokicli import check_endpoint


@pytest.mark.parametrize(
    "endpoint",
    ["ftp://bob:hunter2@loki:3100", "http://bob:hunter2@loki:99999", "http://[::1"],
)
def test_a_bad_endpoint_is_refused_without_its_credentials(endpoint):
    with pytest.raises(ValueError) as exc:
        check_endpoint(endpoint)
    assert "hunter2" not in str(exc.value) and "bob" not in str(exc.value)
    assert "--endpoint" in str(exc.value)


def test_a_good_endpoint_passes():
    check_endpoint("https://user:token@loki.example:3100/")
    check_endpoint("http://localhost:3100")
