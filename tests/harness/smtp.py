"""A real SMTP server (aiosmtpd) that keeps every message it receives, for assertions.

    with SmtpSink() as sink:                       # 127.0.0.1, a free port
        send_mail(host=sink.host, port=sink.port)  # e.g. fleetmedic's notifier
        msg = sink.wait_for(1)[0]                  # email.message.EmailMessage
        assert msg["Subject"] == "..."
        body_text(msg), attachments(msg)

No authentication, no TLS: it stands in for a site relay. Pass ``host`` to listen
elsewhere (e.g. a fleet's host address, for mail sent from inside nodes).

For humans: ``python -m tests.harness.smtp [--host H] [--port P]`` prints a line per
message until Ctrl-C.
"""

from __future__ import annotations

import argparse
import threading
import time
from dataclasses import dataclass, field
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser

from aiosmtpd.controller import Controller


@dataclass
class Received:
    """One delivery: the envelope and the parsed message."""

    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage
    peer: str
    at: float = field(default_factory=time.time)


class _Handler:
    def __init__(self, sink: SmtpSink):
        self.sink = sink

    async def handle_DATA(self, server, session, envelope) -> str:
        raw = envelope.original_content or envelope.content
        msg = BytesParser(policy=policy.default).parsebytes(raw)
        self.sink._add(
            Received(
                mail_from=envelope.mail_from,
                rcpt_tos=list(envelope.rcpt_tos),
                message=msg,
                peer=str(session.peer),
            )
        )
        return "250 Message accepted for delivery"


class _Controller(Controller):
    def _trigger_server(self):
        # port=0: learn the port the kernel chose before aiosmtpd's readiness probe.
        self.port = self.server.sockets[0].getsockname()[1]
        super()._trigger_server()


class SmtpSink:
    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.host = host
        self.port = port
        self.received: list[Received] = []
        self._cond = threading.Condition()
        self._controller: _Controller | None = None

    def start(self) -> SmtpSink:
        self._controller = _Controller(
            _Handler(self),
            hostname=self.host,
            port=self.port,
            server_hostname="sink.fleetmedic.test",
            enable_SMTPUTF8=True,
        )
        self._controller.start()
        self.port = self._controller.port
        return self

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    def __enter__(self) -> SmtpSink:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _add(self, item: Received) -> None:
        with self._cond:
            self.received.append(item)
            self._cond.notify_all()

    @property
    def messages(self) -> list[EmailMessage]:
        with self._cond:
            return [r.message for r in self.received]

    def wait_for(self, count: int = 1, timeout: float = 10.0) -> list[EmailMessage]:
        """Block until at least ``count`` messages arrived; AssertionError after ``timeout``."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.received) >= count, timeout):
                raise AssertionError(
                    f"SMTP sink {self.host}:{self.port} got {len(self.received)} "
                    f"message(s) within {timeout:.0f} s, expected {count}"
                )
            return [r.message for r in self.received]

    def clear(self) -> None:
        with self._cond:
            self.received.clear()


def body_text(msg: EmailMessage) -> str:
    """The message's text (plain preferred, else HTML), decoded."""
    part = msg.get_body(preferencelist=("plain", "html"))
    return part.get_content() if part is not None else ""


def attachments(msg: EmailMessage) -> dict[str, bytes]:
    """Attachment file name -> decoded content. A part counts when it is marked as an
    attachment or carries a file name (yagmail names files only in Content-Type)."""
    found = {}
    for i, part in enumerate(msg.walk()):
        if part.is_multipart():
            continue
        name = part.get_filename()
        if name or part.get_content_disposition() == "attachment":
            found[name or f"part-{i}"] = part.get_payload(decode=True)
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.harness.smtp", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8025)
    args = ap.parse_args(argv)
    sink = SmtpSink(args.host, args.port).start()
    print(f"SMTP sink listening on {sink.host}:{sink.port} (Ctrl-C to stop)", flush=True)
    seen = 0
    try:
        while True:
            try:
                sink.wait_for(seen + 1, timeout=60)
            except AssertionError:
                continue
            for r in sink.received[seen:]:
                seen += 1
                n = len(list(r.message.iter_attachments()))
                print(
                    f"{time.strftime('%H:%M:%S')} from {r.mail_from} to {', '.join(r.rcpt_tos)}: "
                    f"{r.message['Subject']!s} ({n} attachment(s))",
                    flush=True,
                )
    except KeyboardInterrupt:
        pass
    finally:
        sink.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
