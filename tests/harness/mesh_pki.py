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

import ipaddress
from collections.abc import Iterable
from pathlib import Path

from tests.harness import pki

RECEPTOR_NAME_OID = "1.3.6.1.4.1.2312.19.1"


def _utf8string_der(value: str) -> bytes:
    data = value.encode()
    if len(data) < 128:
        return bytes([0x0C, len(data)]) + data
    n = len(data).to_bytes((len(data).bit_length() + 7) // 8, "big")
    return bytes([0x0C, 0x80 | len(n)]) + n + data


class MeshPki:
    """A CA in ``dir`` that issues node certificates. Files are written at once."""

    def __init__(self, dir: Path) -> None:
        self.dir = dir
        dir.mkdir(parents=True, exist_ok=True)
        self._ca = pki.Ca("fleetmedic-test-mesh-ca")
        self.ca_file.write_bytes(self._ca.cert_pem)
        pki.write_private(dir / "ca.key", self._ca.key_pem)
        private, public = pki.rsa_pair()
        pki.write_private(self.work_signing_key, private)
        self.work_verification_key.write_bytes(public)

    @property
    def ca_file(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def work_signing_key(self) -> Path:
        return self.dir / "work.key"

    @property
    def work_verification_key(self) -> Path:
        return self.dir / "work.pub"

    def node_cert(self, node_id: str, addresses: Iterable[str] = ()) -> tuple[Path, Path]:
        """Issue ``<node_id>.crt``/``.key``; returns their paths."""
        from cryptography import x509
        from cryptography.x509.oid import ObjectIdentifier

        sans: list[x509.GeneralName] = [
            x509.DNSName(node_id),
            x509.OtherName(ObjectIdentifier(RECEPTOR_NAME_OID), _utf8string_der(node_id)),
        ]
        sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
        cert, key = self._ca.issue(node_id, server=True, client=True, sans=sans)
        crt, keyf = self.dir / f"{node_id}.crt", self.dir / f"{node_id}.key"
        crt.write_bytes(cert)
        pki.write_private(keyf, key)
        return crt, keyf
