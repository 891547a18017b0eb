"""Escalation and storm email through real SMTP servers (aiosmtpd): the shared sink, and
for login and TLS a local relay that requires them."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult

from fleetmedic.adapters import notify
from fleetmedic.errors import ConfigError, TemporaryError
from fleetmedic.model import keys
from fleetmedic.model.config import SmtpConfig
from fleetmedic.model.nodestate import view
from fleetmedic.model.vocabulary import preset
from tests.harness.smtp import SmtpSink, _Handler, attachments, body_text

# aiosmtpd warns about AUTH without TLS: fine on loopback, and what the login tests need
pytestmark = pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")

HISTORY = [
    {
        "ep": 1,
        "step": "reboot",
        "attempt": 1,
        "start": "2026-11-21T12:00:00Z",
        "end": "2026-11-21T12:04:00Z",
        "result": "fail",
        "phase": "verify",
        "run_id": "20261121T120300Z-verify-1a2b3c4d",
        "message": "verify failed: Xid 79 on GPU 3",
    },
    {
        "ep": 1,
        "step": "reimage",
        "attempt": 1,
        "start": "2026-11-21T12:05:00Z",
        "end": "2026-11-21T12:40:00Z",
        "result": "unreachable",
        "phase": "reinstall",
        "run_id": "20261121T120600Z-reimage-5e6f7a8b",
        "message": "ssh: connect timed out",
    },
]
RESULTS = {"gpu": {"status": "problem", "detail": "GPU 3 missing (expected 8, found 7)"}}


def node_view():
    vocab = preset("default")
    node = {
        "metadata": {
            "name": "gpu-17",
            "labels": {keys.LABEL_VENDOR: "nvidia", "rack": "r4"},
            "annotations": {
                keys.ANN_HISTORY: json.dumps(HISTORY),
                keys.ANN_LAST_RESULTS: json.dumps(RESULTS),
            },
        },
        "spec": {
            "taints": [
                vocab.manual.as_taint(),
                {"key": "example.com/other", "effect": "NoSchedule"},
            ]
        },
        "status": {"addresses": [{"type": "InternalIP", "address": "10.1.4.17"}]},
    }
    return view(node, vocab)


def escalation(evidence=()):
    return notify.Escalation.of(
        node_view(), "reimage did not fix it", "2026-11-21T12:41:00Z", episode=1, evidence=evidence
    )


def smtp_for(sink, **kw) -> SmtpConfig:
    return SmtpConfig(
        host=sink.host,
        port=sink.port,
        tls="none",
        to=["oncall@example.test"],
        **{"from": "fleetmedic@example.test"},
        **kw,
    )


def test_escalation_email_carries_node_attempts_results_and_evidence(smtp_sink, tmp_path):
    bundle = tmp_path / "gpu-17-e1-reboot1.tar.gz"
    bundle.write_bytes(b"\x1f\x8b evidence bytes")
    sent = notify.send_escalation(escalation([bundle]), smtp_for(smtp_sink))
    [msg] = smtp_sink.wait_for(1)
    # the cause first, no bookkeeping prefix: the subject a mail client shows whole
    assert msg["Subject"] == "gpu-17 needs hands: reimage did not fix it"
    assert smtp_sink.received[0].rcpt_tos == ["oncall@example.test"]
    assert smtp_sink.received[0].mail_from == "fleetmedic@example.test"
    assert (
        msg["Message-ID"]
        == sent.message_id
        == "<fleetmedic.gpu-17.e1.20261121T124100Z@example.test>"
    )
    html = msg.get_body(preferencelist=("html",)).get_content()
    for text in (
        "gpu-17",
        "10.1.4.17",
        "rack",
        "r4",
        "fleetmedic.io/repair",
        "example.com/other",
        "Xid 79 on GPU 3",
        "unreachable",
        "20261121T120600Z-reimage-5e6f7a8b",
        "GPU 3 missing (expected 8, found 7)",
        "fleetmedic release gpu-17",
    ):
        assert text in html, text
    files = attachments(msg)
    assert files["gpu-17-e1-reboot1.tar.gz"] == bundle.read_bytes()
    report = json.loads(files["gpu-17-escalation.json"])
    assert report["attempts"] == HISTORY and report["last_results"] == RESULTS
    assert report["address"] == "10.1.4.17" and report["labels"]["rack"] == "r4"


def test_evidence_too_big_or_missing_is_named_not_attached(smtp_sink, tmp_path):
    big = tmp_path / "nvidia-bug-report.tar.gz"
    big.write_bytes(b"x" * 300_000)
    sent = notify.send_escalation(
        escalation([big, tmp_path / "gone.tar.gz"]), smtp_for(smtp_sink, max_attachment_mb=0.1)
    )
    [msg] = smtp_sink.wait_for(1)
    assert set(attachments(msg)) == {"gpu-17-escalation.json"}
    assert len(sent.not_attached) == 2
    html = body_text(msg)
    assert "nvidia-bug-report.tar.gz (300000 bytes)" in html and "gone.tar.gz (missing)" in html


def test_storm_email(smtp_sink):
    storm = notify.Storm(
        pool=40,
        nodes=["gpu-1", "gpu-2", "gpu-9"],
        window=600,
        threshold_percent=5,
        tripped_at="2026-11-21T12:00:00Z",
        cluster="prod-a",
    )
    notify.send_storm(storm, smtp_for(smtp_sink))
    [msg] = smtp_sink.wait_for(1)
    assert "circuit breaker open on prod-a: 3 of 40 nodes" in msg["Subject"]
    assert "gpu-9" in body_text(msg)


def test_relay_down_is_a_temporary_error(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    smtp = SmtpConfig(
        host="127.0.0.1", port=port, tls="none", to=["oncall@example.test"], retry_interval=42
    )
    with pytest.raises(TemporaryError) as exc:
        notify.send_escalation(escalation(), smtp)
    assert exc.value.delay == 42 and f"127.0.0.1:{port}" in str(exc.value)


class _Auth:
    def __init__(self, password: str) -> None:
        self.password = password

    def __call__(self, server, session, envelope, mechanism, auth_data):
        ok = auth_data.login == b"relay-user" and auth_data.password == self.password.encode()
        return AuthResult(success=ok, handled=False)  # handled=False: aiosmtpd sends the 535


@pytest.fixture
def auth_relay():
    """A real relay that requires AUTH (over plain TCP, as a loopback test may)."""
    sink = SmtpSink()
    controller = Controller(
        _Handler(sink),
        hostname="127.0.0.1",
        port=_free_port(),
        authenticator=_Auth("s3cret pass"),
        auth_required=True,
        auth_require_tls=False,
    )
    controller.start()
    sink.host, sink.port = "127.0.0.1", controller.port
    yield sink
    controller.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_login_with_a_systemd_credential(auth_relay, tmp_path):
    (tmp_path / "smtp-password").write_text("s3cret pass\n")
    smtp = smtp_for(auth_relay, user="relay-user", password_credential="smtp-password")
    notify.send_escalation(escalation(), smtp, environ={"CREDENTIALS_DIRECTORY": str(tmp_path)})
    [msg] = auth_relay.wait_for(1)
    assert msg["From"].endswith("<fleetmedic@example.test>"), "login name is not the sender"


def test_wrong_password_is_temporary_and_never_shown(auth_relay, tmp_path):
    secret = tmp_path / "pw"
    secret.write_text("not-the-password\n")
    smtp = smtp_for(auth_relay, user="relay-user", password_file=secret)
    with pytest.raises(TemporaryError) as exc:
        notify.send_escalation(escalation(), smtp)
    assert "login as relay-user refused" in str(exc.value)
    assert "not-the-password" not in str(exc.value)
    assert not auth_relay.received


def test_missing_password_file_is_a_config_error(tmp_path):
    smtp = SmtpConfig(user="u", password_file=tmp_path / "nope", to=["a@example.test"])
    with pytest.raises(ConfigError, match=r"smtp password file .*nope: cannot read"):
        notify.read_password(smtp)


def _self_signed(tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return key, cert


def test_starttls_verifies_the_relay_certificate(tmp_path):
    key, cert = _self_signed(tmp_path)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    sink = SmtpSink()
    controller = Controller(
        _Handler(sink),
        hostname="127.0.0.1",
        port=_free_port(),
        tls_context=ctx,
        require_starttls=True,
    )
    controller.start()
    try:
        base = dict(
            host="127.0.0.1", port=controller.port, tls="starttls", to=["oncall@example.test"]
        )
        with pytest.raises(TemporaryError, match=r"CERTIFICATE_VERIFY_FAILED|certificate"):
            notify.send_escalation(escalation(), SmtpConfig(**base))
        notify.send_escalation(escalation(), SmtpConfig(**base, ca_file=cert))
        assert len(sink.wait_for(1)) == 1
    finally:
        controller.stop()
