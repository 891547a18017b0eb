"""pytest fixtures for the notification receivers, the SMTP sink and the chat webhook
(registered by tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.harness.smtp import SmtpSink
from tests.harness.webhook import Webhook


@pytest.fixture
def smtp_sink():
    """A fresh aiosmtpd sink on 127.0.0.1 (free port): ``.host``, ``.port``,
    ``.messages`` (parsed EmailMessage), ``.received`` (with envelopes), ``.wait_for(n)``."""
    with SmtpSink() as sink:
        yield sink


@pytest.fixture
def webhook():
    """A chat service on 127.0.0.1 (free port) that an Apprise ``json://`` target posts to:
    ``.url(path)``, ``.received``, ``.failing``, ``.wait_for(match)`` (tests/harness/webhook.py)."""
    with Webhook() as hook:
        yield hook
