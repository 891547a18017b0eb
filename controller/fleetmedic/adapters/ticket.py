"""The ticket webhook: one JSON case per RMA candidate, POSTed to the site's tracker or a
vendor's intake (``ticket:``, model/config/ticket.py).

- :func:`render`: the case through a template: ``generic`` is fleetmedic's case as is;
  ``jira`` and ``servicenow`` are the bodies of their create APIs (data/ticket_*.json.j2);
  ``file`` is the site's own Jinja2 template. Templates run sandboxed and must render JSON
  (a template that does not is a ConfigError naming it, never a POST of garbage).
- :func:`send`: one try. The case id goes along as ``Idempotency-Key`` and in the body, so
  a receiver can drop the repeat the one at-least-once window allows (a controller killed
  between the receiver's 200 and the Node's record). 2xx: accepted (the receiver's issue
  key, if it gave one, is returned); 408, 429 and 5xx, or no answer: TemporaryError (tried
  again); any other 4xx: :class:`Refused`, kept on the Node as failed (the receiver will
  not take this body; a person must look).

Why requests, not Apprise (the chat targets' library): Apprise's webhook sends its own
``{title, message, type}`` body; a tracker's create API wants its own JSON. requests and
Jinja2 are not listed in pyproject.toml on purpose: apprise requires requests and
ansible-core requires Jinja2 (both declared dependencies), and a new entry would change
the test fleet's cached node venv for nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from fleetmedic.errors import ConfigError, PermanentError, TemporaryError, one_line
from fleetmedic.model.config import TicketConfig, secret_path

RETRY_STATUS = frozenset({408, 425, 429})
MAX_TEXT = 30_000
"""Characters of the plain-text description templates get (Jira's description field holds
32,767)."""


class Refused(PermanentError):
    """The receiver answered 4xx: this body will not be accepted by trying again."""


def read_url(t: TicketConfig, environ: Mapping[str, str] = os.environ) -> str:
    if t.url:
        return t.url
    return _first_line(secret_path(t.url_file, t.url_credential, environ), t.name, "url")


def read_headers(t: TicketConfig, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    path = secret_path(t.headers_file, t.headers_credential, environ)
    if path is None:
        return {}
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ConfigError(f"ticket {t.name}: cannot read headers {path}: {exc.strerror}") from None
    out = {}
    for n, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise ConfigError(f"ticket {t.name}: {path} line {n}: not `Name: value`")
        out[name.strip()] = value.strip()
    return out


def _first_line(path: Path | None, name: str, what: str) -> str:
    try:
        return path.read_text().splitlines()[0].strip() if path else ""
    except (OSError, IndexError) as exc:
        why = getattr(exc, "strerror", None) or "empty file"
        raise ConfigError(f"ticket {name}: cannot read its {what} from {path}: {why}") from None


@cache
def _env() -> Any:
    # imported here: a controller without a ticket target never pays for Jinja2 or requests
    from jinja2 import StrictUndefined
    from jinja2.sandbox import SandboxedEnvironment

    env = SandboxedEnvironment(undefined=StrictUndefined, autoescape=False)
    env.policies["json.dumps_kwargs"] = {"sort_keys": True, "ensure_ascii": False}
    return env


def text_of(case: Mapping[str, Any]) -> str:
    """The case as plain text, for a tracker's description field."""
    gpu = case.get("gpu") or {}
    rule = case.get("rule") or {}
    lines = [
        str(case.get("summary") or case.get("recommendation") or ""),
        "",
        f"Node: {(case.get('node') or {}).get('name')}",
        f"GPU serial: {gpu.get('serial')}  id: {gpu.get('uuid') or gpu.get('unique_id')}  "
        f"index {gpu.get('index')}  PCI {gpu.get('pci')}  {gpu.get('model') or ''}".rstrip(),
        f"Fault: {rule.get('family')}: {rule.get('episodes')} episodes (rule: {rule.get('why')})",
        "",
        "History (when, node, episode, finding):",
        *(_history_line(h) for h in case.get("history") or ()),
        "",
        f"Evidence on {(case.get('evidence') or {}).get('host')}:",
        *(f"- {b}" for b in (case.get("evidence") or {}).get("bundles") or ()),
        "",
        f"Case id: {case.get('case_id')}",
    ]
    return "\n".join(lines)[:MAX_TEXT]


def _history_line(h: Mapping[str, Any]) -> str:
    return (
        f"- {h.get('at')} {h.get('node')} episode {h.get('ep')}: {h.get('fam')} {h.get('why', '')}"
    )


def render(t: TicketConfig, case: Mapping[str, Any]) -> Any:
    """The JSON body for ``case`` (see the module doc)."""
    if t.template == "generic":
        return dict(case)
    if t.template == "file":
        assert t.template_file is not None
        try:
            source = t.template_file.read_text()
        except OSError as exc:
            raise ConfigError(
                f"ticket {t.name}: template {t.template_file}: {exc.strerror}"
            ) from None
    else:
        source = (
            resources.files("fleetmedic.data").joinpath(f"ticket_{t.template}.json.j2").read_text()
        )
    from jinja2 import TemplateError

    try:
        text = _env().from_string(source).render(case=case, fields=t.fields, text=text_of(case))
        return json.loads(text)
    except (TemplateError, ValueError) as exc:
        raise ConfigError(
            f"ticket {t.name}: template {t.template} did not render JSON: {one_line(exc)}"
        ) from None


def send(
    t: TicketConfig,
    case: Mapping[str, Any],
    environ: Mapping[str, str] = os.environ,
) -> str:
    """POST ``case`` once; the receiver's issue key or id ("" when it said none)."""
    import requests

    body = render(t, case)
    url = read_url(t, environ)
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json",
        "User-Agent": "fleetmedic",
        "Idempotency-Key": str(case.get("case_id", "")),
        **read_headers(t, environ),
    }
    verify: bool | str = str(t.ca_file) if t.ca_file else True
    try:
        r = requests.post(url, json=body, headers=headers, timeout=t.timeout, verify=verify)
    except requests.RequestException as exc:
        # the exception text may hold the URL (a secret); say only what kind of failure
        raise TemporaryError(
            f"ticket {t.name}: no answer ({type(exc).__name__})", t.retry_interval
        ) from None
    if r.status_code >= 500 or r.status_code in RETRY_STATUS:
        raise TemporaryError(f"ticket {t.name}: HTTP {r.status_code}", t.retry_interval)
    if r.status_code >= 400:
        raise Refused(f"ticket {t.name}: HTTP {r.status_code}: {one_line(r.text)[:200]}")
    return _issue_of(r)


def _issue_of(r: Any) -> str:
    try:
        data = r.json()
    except ValueError:
        return ""
    if isinstance(data, Mapping):
        inner = data.get("result")
        result: Mapping[str, Any] = inner if isinstance(inner, Mapping) else data
        for key in ("key", "number", "id", "sys_id", "ticket", "case_id"):
            if result.get(key):
                return str(result[key])[:80]
    return ""
