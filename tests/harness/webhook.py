"""A real HTTP receiver for chat notifications: the service at the other end of an
Apprise ``json://`` URL (a webhook). It records every POST (path, headers, JSON body)
and answers 200, or 503 while ``failing`` says so: a dead webhook.

    with Webhook() as hook:
        send(TargetConfig(name="t", url=hook.url("fleetmedic")), msg)
        body = hook.wait_for(lambda r: r.body["title"].startswith("[fleetmedic]"))
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: Any
    answered: int


class Webhook:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self.failing = 0  # answer 503 to this many more requests
        self._cond = threading.Condition()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = raw.decode(errors="replace")
                with hook._cond:
                    code = 503 if hook.failing > 0 else 200
                    hook.failing = max(0, hook.failing - 1)
                    hook.received.append(Received(self.path, dict(self.headers), body, code))
                    hook._cond.notify_all()
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str = "") -> str:
        """The Apprise URL of this receiver (JSON POSTs to /path)."""
        return f"json://127.0.0.1:{self.port}/{path}"

    def wait_for(
        self, match: Callable[[Received], bool], timeout: float = 30, ok_only: bool = True
    ) -> Received:
        with self._cond:
            found: list[Received] = []

            def seen() -> bool:
                found[:] = [r for r in self.received if (not ok_only or r.answered == 200)]
                found[:] = [r for r in found if match(r)]
                return bool(found)

            if not self._cond.wait_for(seen, timeout):
                raise AssertionError(f"no matching POST within {timeout}s: {self.received}")
            return found[0]

    def __enter__(self) -> Webhook:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
