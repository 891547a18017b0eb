"""A real HTTP receiver for chat notifications: the service at the other end of an
Apprise ``json://`` URL (a webhook), and for the RMA tickets (``http_url``: a tracker's
create API). It records every POST (path, headers, JSON body) and answers 200 (with
``reply`` as its JSON body, if set), or 503 while ``failing`` says so (a dead webhook),
or 400 while ``refusing`` does (a tracker that will not take the body).

    with Webhook() as hook:
        send(TargetConfig(name="t", url=hook.url("fleetmedic")), msg)
        body = hook.wait_for(lambda r: r.body["title"].startswith("[fleetmedic]"))
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: Any
    answered: int
    at: float = field(default_factory=time.time)  # when it arrived (Unix time)


class Webhook:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self.failing = 0  # answer 503 to this many more requests
        self.refusing = 0  # answer 400 to this many more requests
        self.reply: Any = None  # the JSON body of a 200 (a tracker's new issue key)
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
                    code = 503 if hook.failing > 0 else 400 if hook.refusing > 0 else 200
                    if code == 503:
                        hook.failing -= 1
                    elif code == 400:
                        hook.refusing -= 1
                    hook.received.append(Received(self.path, dict(self.headers), body, code))
                    hook._cond.notify_all()
                    out = json.dumps(hook.reply).encode() if code == 200 and hook.reply else b""
                self.send_response(code)
                self.send_header("Content-Length", str(len(out)))
                if out:
                    self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str = "") -> str:
        """The Apprise URL of this receiver (JSON POSTs to /path)."""
        return f"json://127.0.0.1:{self.port}/{path}"

    def http_url(self, path: str = "") -> str:
        """Its plain HTTP URL (the ticket webhook POSTs there)."""
        return f"http://127.0.0.1:{self.port}/{path}"

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
