"""Test certificates (python ``cryptography``, an ansible-core dependency): one builder for
the API server's PKI (tests/harness/kube.py) and the Receptor mesh's (mesh_pki.py).

    ca = Ca("fleetmedic-test-ca")
    crt, key = ca.issue("kube-apiserver", server=True, sans=[x509.DNSName("localhost")])
    ca.cert_pem, ca.key_pem

Every key is EC P-256 (PKCS#8 PEM); every certificate is valid from five minutes ago (a
clock a little behind is no failure) for 30 days, SHA-256 signed. ``issue`` makes a leaf:
server and/or client auth, with the subjectAltNames given.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

VALID = dt.timedelta(days=30)
SKEW = dt.timedelta(minutes=5)


def key_pem(key: Any) -> bytes:
    """A private key as unencrypted PKCS#8 PEM."""
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def rsa_pair() -> tuple[bytes, bytes]:
    """A 2048-bit RSA pair as (private PEM, public PEM): token and work signing keys."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return key_pem(key), public


def write_private(path: Path, data: bytes) -> None:
    """Write a key readable by its owner only."""
    path.write_bytes(data)
    path.chmod(0o600)


class Ca:
    """A self-signed CA named ``cn`` that issues leaf certificates."""

    def __init__(self, cn: str) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        self._now = dt.datetime.now(dt.UTC) - SKEW
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = _name(cn)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._now)
            .not_valid_after(self._now + VALID)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return key_pem(self._key)

    def issue(
        self,
        cn: str,
        *,
        org: str | None = None,
        server: bool = False,
        client: bool = False,
        sans: Sequence[Any] = (),
    ) -> tuple[bytes, bytes]:
        """A leaf certificate and its key, as PEM: ``sans`` are x509.GeneralName values."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID

        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
        usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        key = ec.generate_private_key(ec.SECP256R1())
        b = (
            x509.CertificateBuilder()
            .subject_name(_name(cn, org))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._now)
            .not_valid_after(self._now + VALID)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if sans:
            b = b.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
        cert = b.sign(self._key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), key_pem(key)


def _name(cn: str, org: str | None = None) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)
