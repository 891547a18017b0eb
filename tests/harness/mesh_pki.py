"""Certificates and keys for the test Receptor mesh (python ``cryptography``).

- one CA (``ca.crt``/``ca.key``);
- per node ``<id>.crt``/``<id>.key``: server and client auth, with the node ID as a
  DNS name and as Receptor's own subjectAltName otherName (OID 1.3.6.1.4.1.2312.19.1,
  a UTF8String), which Receptor checks against its node ID at start, plus the IP
  addresses the node listens on (a TCP peer verifies the server by the address it dials);
- ``work.key``/``work.pub``: the RSA pair that signs work submissions on the controller
  and verifies them on execution nodes (``work-signing``/``work-verification``).

These are the files ``receptor --cert-makereq``/``--cert-signreq`` would produce;
generating them here keeps the test independent of Receptor's CLI.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable
from pathlib import Path

RECEPTOR_NAME_OID = "1.3.6.1.4.1.2312.19.1"


def _utf8string_der(value: str) -> bytes:
    data = value.encode()
    if len(data) < 128:
        return bytes([0x0C, len(data)]) + data
    n = len(data).to_bytes((len(data).bit_length() + 7) // 8, "big")
    return bytes([0x0C, 0x80 | len(n)]) + n + data


def _pem_key(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class MeshPki:
    """A CA in ``dir`` that issues node certificates. Files are written at once."""

    def __init__(self, dir: Path) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, rsa
        from cryptography.x509.oid import NameOID

        self.dir = dir
        dir.mkdir(parents=True, exist_ok=True)
        self._now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
        self._later = self._now + dt.timedelta(days=30)
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fleetmedic-test-mesh-ca")])
        self._ca = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._now)
            .not_valid_after(self._later)
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
        self.ca_file.write_bytes(self._ca.public_bytes(serialization.Encoding.PEM))
        self._write_private(dir / "ca.key", _pem_key(self._key))
        signing = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._write_private(self.work_signing_key, _pem_key(signing))
        self.work_verification_key.write_bytes(
            signing.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    @property
    def ca_file(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def work_signing_key(self) -> Path:
        return self.dir / "work.key"

    @property
    def work_verification_key(self) -> Path:
        return self.dir / "work.pub"

    @staticmethod
    def _write_private(path: Path, data: bytes) -> None:
        path.write_bytes(data)
        path.chmod(0o600)

    def node_cert(self, node_id: str, addresses: Iterable[str] = ()) -> tuple[Path, Path]:
        """Issue ``<node_id>.crt``/``.key``; returns their paths."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

        key = ec.generate_private_key(ec.SECP256R1())
        sans: list[x509.GeneralName] = [
            x509.DNSName(node_id),
            x509.OtherName(ObjectIdentifier(RECEPTOR_NAME_OID), _utf8string_der(node_id)),
        ]
        sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node_id)]))
            .issuer_name(self._ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._now)
            .not_valid_after(self._later)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        crt, keyf = self.dir / f"{node_id}.crt", self.dir / f"{node_id}.key"
        crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self._write_private(keyf, _pem_key(key))
        return crt, keyf
