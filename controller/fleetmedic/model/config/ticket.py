"""The ``ticket:`` section: a webhook that receives one JSON case per RMA candidate, shaped
for the site's tracker or the vendor's intake.

    ticket:
      url_credential: rma-webhook          # $CREDENTIALS_DIRECTORY/rma-webhook
      template: jira                       # generic | jira | servicenow | file
      fields: {project: OPS, issuetype: Bug}
      headers_credential: rma-auth         # e.g. "Authorization: Basic ..." per line

One case per lemon (node, GPU serials, the GPU's fault history, the recommendation, where
the bundle is), POSTed as JSON through the outbox (retried, kept on the pause ConfigMap
until it is accepted), its state on the Node, so a restart never loses it nor sends it
twice (controller/ticketer.py).
Unset: no tickets; the email still carries the case.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from fleetmedic.model.config.types import ConfigPath, Duration, Section

TEMPLATES = ("generic", "jira", "servicenow")
"""The built-in templates (fleetmedic/data/ticket_<name>.json.j2)."""


class TicketConfig(Section):
    name: str = Field("ticket", pattern=r"^[A-Za-z0-9][-_.A-Za-z0-9]{0,62}$")
    """Shown in logs instead of the URL (which may hold a secret)."""
    url: str | None = None
    """The webhook (http:// or https://) when it holds no secret."""
    url_file: ConfigPath | None = None
    """File whose first line is the webhook URL."""
    url_credential: str | None = None
    """systemd credential holding the URL; wins over the file."""
    template: Literal["generic", "jira", "servicenow", "file"] = "generic"
    """`generic` (fleetmedic's case as is), `jira` (REST API v2 create-issue body),
    `servicenow` (Table API incident), or `file`: `template_file`."""
    template_file: ConfigPath | None = None
    """A Jinja2 template of your own (with `template: file`) that renders JSON from `case`
    (the generic case) and `fields`."""
    fields: dict[str, str] = Field(default_factory=dict)
    """Values the template puts in (Jira's `project` and `issuetype`, ServiceNow's
    `assignment_group` and `category`, a vendor's account id)."""
    headers_file: ConfigPath | None = None
    """File of `Name: value` lines sent with each POST (an API token, Basic auth)."""
    headers_credential: str | None = None
    """systemd credential holding those lines; wins over the file."""
    ca_file: ConfigPath | None = None
    """CA bundle for an https:// webhook with a private CA. Unset: the system's."""
    timeout: Duration = 10
    """Connect and read timeout per POST."""
    retry_interval: Duration = 60
    """A POST the receiver did not answer (or answered 5xx, 408, 429) is tried again this
    often, on the outbox's thread."""
    tries: int = Field(60, ge=1)
    """Then the case stays on the Node marked failed (status shows it), the email has it."""

    @model_validator(mode="after")
    def _one_url(self) -> TicketConfig:
        given = [f for f in ("url", "url_file", "url_credential") if getattr(self, f)]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of url, url_file, url_credential"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must be http:// or https://, got {self.url[:40]!r}")
        if (self.template == "file") != (self.template_file is not None):
            raise ValueError("template_file goes with template: file (and only with it)")
        if self.template == "jira" and not self.fields.get("project"):
            raise ValueError("template jira needs fields.project (the Jira project's key)")
        return self
