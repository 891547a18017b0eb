"""A work unit's results read straight from its execution node (``direct_results``).

Receptor 1.4.4's node copies a remote unit's output on two fixed 1 s polls (state and
output size in ``monitorRemoteStatus``, then ``monitorRemoteStdout`` dials only once it
has seen the size grow; neither interval is a setting), so a short play's first byte
reaches the controller's node about 1 s after the execution node has it. Here the
controller opens a ``connect`` session from its node to the execution node's control
service and asks it for ``work results`` of the remote unit: that node follows its own
file every 0.25 s. The request is signed as Receptor signs its own (a JWT, RS512, the
audience the execution node's ID) when the execution node verifies signatures.

The key is read at each open, from a file that must not be world-readable, and used
only to sign; neither it nor a signature is logged or written anywhere.

The session is one more dial of the execution node per run, and the control service
answers one ``work results`` per connection (it closes its side after the stream), so
it cannot be shared between runs; and our node still dials for its own copy of the
output (Receptor starts that copier for every remote unit, with no setting). With stock
Receptor 1.4.4 that extra dial beside other units in flight wedges the link, so the
config allows this only one unit at a time per node, or on a patched Receptor
(ReceptorConfig.direct_results, tests/receptor/patches/UPSTREAM.md).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from fleetmedic.errors import ConfigError
from fleetmedic.model.config import ReceptorConfig

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

TOKEN_TTL = 120
"""Seconds a signature stays valid: one request's worth, with room for clocks that
disagree by a minute (the execution node checks the expiry against its own)."""
OPEN_TIMEOUT = 10.0
"""Seconds to wait for each answer while the session is set up (a dial and a TLS
handshake over the mesh)."""


class Refused(Exception):
    """The direct stream could not be opened (the usual one still can)."""


def check_key(path: Path) -> RSAPrivateKey:
    """The key in ``path``, refused (ConfigError) when the file is missing, unreadable,
    not a regular file, world-readable or holds no unencrypted RSA private key."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise ConfigError(f"signing_key {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"signing_key {path}: not a regular file")
        if st.st_mode & 0o007:
            raise ConfigError(
                f"signing_key {path}: mode {stat.S_IMODE(st.st_mode):04o} lets every user"
                " in; refused (chmod o-rwx)"
            )
        pem = f.read()
    return _private_key(pem, path)


def signature(key_file: Path, node: str, now: float | None = None) -> str:
    """A JWT for ``node`` (RS512, ``aud`` the node ID, ``exp`` TOKEN_TTL from now), as
    Receptor's ``createSignature`` makes it."""
    key = check_key(key_file)
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    exp = int((time.time() if now is None else now) + TOKEN_TTL)
    header = _b64({"alg": "RS512", "typ": "JWT"})
    claims = _b64({"aud": [node], "exp": exp})
    signed = f"{header}.{claims}".encode()
    sig = key.sign(signed, padding.PKCS1v15(), hashes.SHA512())
    return f"{header}.{claims}.{base64.urlsafe_b64encode(sig).rstrip(b'=').decode()}"


def open_results(
    settings: ReceptorConfig, node: str, remote_unit: str
) -> tuple[socket.socket, BinaryIO]:
    """A stream of ``remote_unit``'s output from execution node ``node``, from byte 0:
    the socket and a buffered reader of it. Refused with a one-line reason (never the
    signature) when the session or the request fails."""
    request: dict[str, object] = {
        "command": "work",
        "subcommand": "results",
        "unitid": remote_unit,
        "startpos": 0,
    }
    if settings.sign_work:
        if settings.signing_key is None:
            raise Refused("sign_work is on and no signing_key is set")
        try:
            request["signature"] = signature(settings.signing_key, node)
        except ConfigError as exc:
            raise Refused(str(exc)) from None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    reader = sock.makefile("rb")
    try:
        sock.settimeout(OPEN_TIMEOUT)
        sock.connect(str(settings.socket))
        _expect(reader, "Receptor Control, node ", "the controller's node")
        tls = f" {settings.tls_client}" if settings.tls_client else ""
        sock.sendall(f"connect {node} control{tls}\n".encode())
        _expect(reader, "Connecting", "connect")
        _expect(reader, f"Receptor Control, node {node}", node)
        sock.sendall(json.dumps(request).encode() + b"\n")
        _expect(reader, "Streaming results for work unit", "work results")
        sock.settimeout(None)
    except (OSError, Refused) as exc:
        reader.close()
        sock.close()
        raise Refused(str(exc) if isinstance(exc, Refused) else f"{node}: {exc}") from None
    return sock, reader


def _expect(reader: BinaryIO, prefix: str, what: str) -> None:
    line = reader.readline(4096).decode(errors="replace").strip()
    if not line.startswith(prefix):
        raise Refused(f"{what}: {line[:200] or 'connection closed'}")


def _private_key(pem: bytes, path: Path) -> RSAPrivateKey:
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(pem, password=None)
    except (ValueError, TypeError):
        raise ConfigError(f"signing_key {path}: not an unencrypted PEM private key") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ConfigError(f"signing_key {path}: not an RSA key (Receptor signs with RS512)")
    return key


def _b64(data: dict) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
