"""The SMTP sink receives what yagmail sends through it as an unauthenticated relay."""

from __future__ import annotations

import yagmail

from tests.harness.smtp import attachments, body_text


def test_yagmail_delivers_subject_body_and_attachment(smtp_sink, tmp_path):
    evidence = tmp_path / "node-2-evidence.txt"
    evidence.write_text("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    yag = yagmail.SMTP(
        user="fleetmedic@example.test",
        host=smtp_sink.host,
        port=smtp_sink.port,
        smtp_starttls=False,
        smtp_ssl=False,
        smtp_skip_login=True,
    )
    try:
        result = yag.send(
            to="oncall@example.test",
            subject="fleetmedic: node-2 needs hands",
            contents=[yagmail.raw("node-2 failed reboot and reimage."), str(evidence)],
        )
    finally:
        yag.close()
    assert result is not False, "yagmail reported a failed send"

    (msg,) = smtp_sink.wait_for(1, timeout=10)
    assert msg["Subject"] == "fleetmedic: node-2 needs hands"
    assert "oncall@example.test" in msg["To"]
    assert smtp_sink.received[0].mail_from == "fleetmedic@example.test"
    assert smtp_sink.received[0].rcpt_tos == ["oncall@example.test"]
    assert "node-2 failed reboot and reimage." in body_text(msg)
    assert attachments(msg) == {"node-2-evidence.txt": evidence.read_bytes()}


def test_sink_keeps_every_message_in_order(smtp_sink):
    yag = yagmail.SMTP(
        user="fleetmedic@example.test",
        host=smtp_sink.host,
        port=smtp_sink.port,
        smtp_starttls=False,
        smtp_ssl=False,
        smtp_skip_login=True,
    )
    try:
        for i in range(3):
            assert (
                yag.send(
                    to="oncall@example.test",
                    subject=f"msg {i}",
                    contents=[yagmail.raw(f"body {i}")],
                )
                is not False
            )
    finally:
        yag.close()
    msgs = smtp_sink.wait_for(3)
    assert [m["Subject"] for m in msgs] == ["msg 0", "msg 1", "msg 2"]
    smtp_sink.clear()
    assert smtp_sink.messages == []
