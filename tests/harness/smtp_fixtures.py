"""pytest fixtures for the SMTP sink (registered by tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.harness.smtp import SmtpSink


@pytest.fixture
def smtp_sink():
    """A fresh aiosmtpd sink on 127.0.0.1 (free port): ``.host``, ``.port``,
    ``.messages`` (parsed EmailMessage), ``.received`` (with envelopes), ``.wait_for(n)``."""
    with SmtpSink() as sink:
        yield sink
