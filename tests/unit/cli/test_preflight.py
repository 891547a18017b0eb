"""``fleetmedic run``'s start-up check (controller/daemon.py ``preflight``) refuses a
work-signing key for ``direct_results`` that other users can read, before any run."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from fleetmedic.controller import daemon
from fleetmedic.errors import ConfigError
from fleetmedic.model import config


def test_a_world_readable_signing_key_stops_the_start(tmp_path, monkeypatch):
    key = tmp_path / "work-private.pem"
    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    key.write_bytes(pem)
    key.chmod(0o644)
    mesh = {
        "socket": "rx.sock",
        "direct_results": True,
        "signing_key": str(key),
        "max_in_flight": 1,
    }
    cfg = config.parse(
        {
            "ansible": {"run_dir": str(tmp_path / "runs"), "evidence_dir": str(tmp_path / "ev")},
            "profiles": [{"name": "far", "selector": "pool=far", "executor": {"receptor": mesh}}],
        },
        base=tmp_path,
    )
    monkeypatch.setattr(config.Config, "missing_files", lambda self: [])
    with pytest.raises(ConfigError, match=r"work-private\.pem: mode 0644 .* refused"):
        daemon.preflight(cfg)
    key.chmod(0o640)
    daemon.preflight(cfg)
