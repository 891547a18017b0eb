"""tests/harness/pki.py, the one certificate builder of the test servers: the API server's
files (kube._write_pki) and the Receptor mesh's (MeshPki) are certificates TLS accepts,
issued by their CA, with the usages and names each server is checked by."""

from __future__ import annotations

import ssl
import stat
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.harness import kube
from tests.harness.mesh_pki import RECEPTOR_NAME_OID, MeshPki


def _usages(cert: x509.Certificate) -> set:
    return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def _private(path: Path) -> bool:
    return stat.S_IMODE(path.stat().st_mode) == 0o600


def test_api_server_pki(tmp_path: Path) -> None:
    kube._write_pki(tmp_path, ["node-7.test", "192.168.252.9"])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "apiserver.crt", tmp_path / "apiserver.key")
    ctx.load_verify_locations(tmp_path / "ca.crt")
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    server = x509.load_pem_x509_certificate((tmp_path / "apiserver.crt").read_bytes())
    admin = x509.load_pem_x509_certificate((tmp_path / "admin.crt").read_bytes())
    server.verify_directly_issued_by(ca)
    admin.verify_directly_issued_by(ca)
    assert _usages(server) == {ExtendedKeyUsageOID.SERVER_AUTH}
    assert _usages(admin) == {ExtendedKeyUsageOID.CLIENT_AUTH}
    assert "O=system:masters" in admin.subject.rfc4514_string()
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"localhost", "kubernetes.default.svc", "node-7.test"} <= set(
        sans.get_values_for_type(x509.DNSName)
    )
    assert "192.168.252.9" in {str(a) for a in sans.get_values_for_type(x509.IPAddress)}
    assert all(_private(k) for k in tmp_path.glob("*.key"))
    assert b"PUBLIC KEY" in (tmp_path / "sa.pub").read_bytes()


def test_mesh_pki(tmp_path: Path) -> None:
    pki = MeshPki(tmp_path)
    crt, key = pki.node_cert("exec-1", ["192.168.7.2"])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_cert_chain(crt, key)
    ca = x509.load_pem_x509_certificate(pki.ca_file.read_bytes())
    cert = x509.load_pem_x509_certificate(crt.read_bytes())
    cert.verify_directly_issued_by(ca)
    assert _usages(cert) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    [other] = sans.get_values_for_type(x509.OtherName)
    assert other.type_id.dotted_string == RECEPTOR_NAME_OID and other.value.endswith(b"exec-1")
    assert _private(key) and _private(pki.work_signing_key) and _private(tmp_path / "ca.key")
