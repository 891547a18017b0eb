"""The direct results request's signature and key custody (adapters/receptor_direct.py):
a JWT as Receptor's own ``createSignature`` makes it, from a key file that is refused when
other users can read it. That an execution node accepts it, and the stream itself, are
tested on the real mesh (tests/integration/test_receptor_executor.py)."""

from __future__ import annotations

import base64
import json
import logging

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from fleetmedic.adapters import receptor_direct
from fleetmedic.errors import ConfigError
from fleetmedic.model.config import ReceptorConfig


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write(path, key, mode=0o600):
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(mode)
    return path


def _part(token: str, i: int) -> bytes:
    p = token.split(".")[i]
    return base64.urlsafe_b64decode(p + "=" * (-len(p) % 4))


def test_signature_is_an_rs512_jwt_for_that_node_only(tmp_path, rsa_key):
    key = _write(tmp_path / "work-private.pem", rsa_key)
    token = receptor_direct.signature(key, "exec-1", now=1_000_000)
    assert json.loads(_part(token, 0)) == {"alg": "RS512", "typ": "JWT"}
    assert json.loads(_part(token, 1)) == {"aud": ["exec-1"], "exp": 1_000_120}
    signed = token.rsplit(".", 1)[0].encode()
    pub = rsa_key.public_key()
    pub.verify(_part(token, 2), signed, padding.PKCS1v15(), hashes.SHA512())
    with pytest.raises(InvalidSignature):
        pub.verify(_part(token, 2), signed + b"x", padding.PKCS1v15(), hashes.SHA512())


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o400])
def test_a_key_only_its_owner_and_group_read_is_taken(tmp_path, rsa_key, mode):
    assert receptor_direct.check_key(_write(tmp_path / "k.pem", rsa_key, mode))


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o602, 0o666])
def test_a_key_other_users_can_reach_is_refused(tmp_path, rsa_key, mode):
    key = _write(tmp_path / "k.pem", rsa_key, mode)
    with pytest.raises(ConfigError, match=r"k\.pem: mode .* refused") as exc:
        receptor_direct.check_key(key)
    assert "PRIVATE" not in str(exc.value)


def test_missing_linked_foreign_and_bad_keys_are_one_line_errors(tmp_path, rsa_key):
    real = _write(tmp_path / "real.pem", rsa_key)
    (tmp_path / "link.pem").symlink_to(real)
    ecdsa = ec.generate_private_key(ec.SECP256R1())
    bad = tmp_path / "bad.pem"
    bad.write_text("not a key\n")
    bad.chmod(0o600)
    for path, says in (
        (tmp_path / "absent.pem", "No such file"),
        (tmp_path / "link.pem", "link"),  # O_NOFOLLOW: never through a symlink
        (_write(tmp_path / "ec.pem", ecdsa), "not an RSA key"),
        (bad, "not an unencrypted PEM private key"),
    ):
        with pytest.raises(ConfigError, match=says) as exc:
            receptor_direct.check_key(path)
        assert "\n" not in str(exc.value)


def test_a_refused_key_refuses_the_direct_stream_and_says_nothing_of_the_key(
    tmp_path, rsa_key, caplog
):
    key = _write(tmp_path / "k.pem", rsa_key, 0o644)
    s = ReceptorConfig(
        socket=tmp_path / "absent.sock", direct_results=True, signing_key=key, max_in_flight=1
    )
    caplog.set_level(logging.DEBUG)
    with pytest.raises(receptor_direct.Refused, match="refused"):
        receptor_direct.open_results(s, "exec-1", "abc")
    key.chmod(0o600)
    with pytest.raises(receptor_direct.Refused, match=r"No such file"):
        receptor_direct.open_results(s, "exec-1", "abc")
    assert "BEGIN" not in caplog.text
