"""Config sections: where the cluster is, which taints, what counts as a foreign
signal, SMTP, metrics and leader election. See the package docstring."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import Field, field_validator, model_validator

from fleetmedic.model import selector
from fleetmedic.model.config.types import (
    ConfigPath,
    Duration,
    Email,
    LabelValue,
    Port,
    Section,
    TaintKey,
)
from fleetmedic.model.nodestate import ForeignSignal
from fleetmedic.model.vocabulary import NAMED, Vocabulary, preset, presets


class KubeConfig(Section):
    kubeconfig: ConfigPath | None = None
    """kubeconfig file. Unset: in-cluster service account if in a pod, else $KUBECONFIG or
    ~/.kube/config, the same order kubectl uses, so no surprise."""
    kubeconfig_credential: str | None = None
    """systemd credential holding the kubeconfig (LoadCredential=NAME:...); wins over
    `kubeconfig`, so the hardened unit needs no readable secret on disk."""
    context: str | None = None
    """kubeconfig context. Unset: the current context, as kubectl."""
    label_selector: str | None = None
    """Which Nodes form the pool fleetmedic manages (and the base of every percentage).
    Unset: all Nodes; set it (e.g. `nvidia.com/gpu.present=true`) to leave CPU nodes alone."""

    @field_validator("label_selector")
    @classmethod
    def _selector(cls, v: str | None) -> str | None:
        if v is not None and v.strip():
            selector.parse(v)  # (a typo is a config error at start, as profiles[].selector)
        return v


class TaintNameConfig(Section):
    key: TaintKey
    value: LabelValue = ""


class TaintsConfig(Section):
    preset: str = "default"
    """`default` (fleetmedic.io/repair=<step>) or `ossci` (repair-reboot, ...), so a fleet
    already fenced with the OSSCI names can be taken over without relabelling."""
    diagnose: TaintNameConfig | None = None
    """Explicit names override single entries of the preset; unset keeps the preset's."""
    reset: TaintNameConfig | None = None
    reboot: TaintNameConfig | None = None
    power_cycle: TaintNameConfig | None = None
    reimage: TaintNameConfig | None = None
    replace: TaintNameConfig | None = None
    manual: TaintNameConfig | None = None
    slow_network: TaintNameConfig | None = None
    maintenance: TaintNameConfig | None = None
    """The taint a diagnostic sweep holds on an idle node while it runs (`sweep:`)."""

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, v: str) -> str:
        if v not in presets():
            raise ValueError(f"must be one of {', '.join(sorted(presets()))}, got {v!r}")
        return v

    @model_validator(mode="after")
    def _distinct(self) -> TaintsConfig:
        names = [(t.key, t.value) for t in self.vocabulary().all()]
        if len(set(names)) != len(names):
            raise ValueError(f"{', '.join(NAMED)} must be distinct taints")
        return self

    def vocabulary(self) -> Vocabulary:
        picked = {s: getattr(self, s) for s in NAMED}
        return preset(self.preset).with_overrides(
            {s: {"key": o.key, "value": o.value} for s, o in picked.items() if o}
        )


ForeignRung = Literal["diagnose", "reset", "reboot", "power_cycle", "reimage", "manual"]
"""Where a foreign tool's signal may put a node: ``diagnose`` for a tool that says "look
closer" (a warning, a suspect GPU), so the vendor's diagnostics decide before any repair."""


class ForeignSignalConfig(Section):
    kind: Literal["taint", "condition", "label"]
    """`taint` matches a taint key (and value if given); `condition` a NodeCondition type
    whose status equals `value` (default "True"); `label` a label key (with one of
    `values`, if given)."""
    key: str
    """The taint key, label key or condition type. For a condition, a glob (`*`) with
    `reason`: a tool that names a condition after each of its checks (NVSentinel)."""
    value: str | None = None
    values: tuple[str, ...] = ()
    """`label`: the values that are the signal (empty: any value)."""
    reason: str | None = None
    """`condition`: a glob the condition's reason must match (required with a glob key, or
    `*` would take the kubelet's own conditions)."""
    fingerprint_labels: tuple[str, ...] = ()
    """`label`: labels whose values tell the signal set anew (the tool's timestamp label):
    with `wait-for-change`, a new value means a new fault, not the one already answered."""
    tool: str = Field("", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$|^$")
    """Short name of the tool (status, inventory group `foreign_<tool>`); default: the key."""
    enters: ForeignRung = "reboot"
    """The rung a healthy node carrying it enters (the next one up if the ladder skips it)."""
    after_repair: Literal["clear", "wait-for-change"] = "wait-for-change"
    """After fleetmedic's repair passed verify: `clear` removes exactly this taint (for tools
    that never clear their own, or a repaired node would enter again: a loop);
    `wait-for-change` acts again only when the tool sets the signal anew (a new taint
    `timeAdded`/value, a new condition `lastTransitionTime`, a new label value), for tools
    that re-check."""
    severity_label: str | None = None
    """A node label whose value picks the rung (`severity_rungs`), e.g. the AWS suite's."""
    severity_rungs: dict[str, ForeignRung | None] = Field(default_factory=dict)
    """Label value -> rung; null: the tool asks for nothing (e.g. MONITOR)."""
    evidence_annotation: str | None = None
    """A node annotation holding the tool's findings, kept in the node's history."""

    @model_validator(mode="after")
    def _clear_taints_only(self) -> ForeignSignalConfig:
        if self.kind != "taint" and self.after_repair == "clear":
            raise ValueError(
                f"after_repair: clear removes a taint; a {self.kind} belongs to the tool that "
                "sets it (use wait-for-change)"
            )
        if self.kind == "condition" and self.reason is None and any(c in self.key for c in "*?["):
            raise ValueError(
                f"key {self.key!r} is a glob: add `reason` (a glob such as *IsNotHealthy), "
                "or it takes the kubelet's own conditions (Ready, ...)"
            )
        if self.kind != "label" and (self.values or self.fingerprint_labels):
            raise ValueError("values and fingerprint_labels are for `kind: label`")
        if self.kind == "label" and self.value is not None:
            raise ValueError("`kind: label` takes `values` (a list), not `value`")
        return self

    def signal(self) -> ForeignSignal:
        return ForeignSignal(
            self.kind,
            self.key,
            self.value,
            tool=self.tool,
            enters=self.enters,
            after_repair=self.after_repair,
            severity_label=self.severity_label,
            severity_rungs=tuple(self.severity_rungs.items()),
            evidence_annotation=self.evidence_annotation,
            values=self.values,
            reason=self.reason,
            fingerprint_labels=self.fingerprint_labels,
        )


@cache
def foreign_presets() -> dict[str, tuple[ForeignSignalConfig, ...]]:
    """The presets of fleetmedic/data/foreign_presets.yaml, by name."""
    text = resources.files("fleetmedic.data").joinpath("foreign_presets.yaml").read_text()
    return {
        name: tuple(ForeignSignalConfig.model_validate(e) for e in entries)
        for name, entries in yaml.safe_load(text).items()
    }


def expand_foreign(value: Any) -> Any:
    """`foreign_signals` with each preset name (a string) replaced by its entries."""
    if not isinstance(value, (list, tuple)):
        return value
    out: list[Any] = []
    for item in value:
        if isinstance(item, str):
            known = foreign_presets()
            if item not in known:
                raise ValueError(
                    f"unknown foreign-signal preset {item!r} (known: {', '.join(sorted(known))})"
                )
            out.extend(known[item])
        else:
            out.append(item)
    return out


DEFAULT_FOREIGN_PRESETS = ("konduktor", "aws-gpu-healthcheck", "npd")
DEFAULT_FOREIGN: tuple[ForeignSignalConfig, ...] = tuple(expand_foreign(DEFAULT_FOREIGN_PRESETS))


class SmtpConfig(Section):
    host: str = "localhost"
    """The site relay; localhost because most bastions run a local MTA."""
    port: Port = 25
    tls: Literal["none", "starttls", "ssl"] = "starttls"
    """starttls: what relays expect on 25/587; `ssl` for 465; `none` only for a loopback sink."""
    user: str | None = None
    """Login name. Unset: no login (an unauthenticated relay)."""
    password: Any = Field(None, exclude=True, repr=False)
    password_file: ConfigPath | None = None
    """File holding the SMTP password (first line)."""
    password_credential: str | None = None
    """systemd credential with the password ($CREDENTIALS_DIRECTORY/NAME); wins over the file."""
    sender: Email = Field("fleetmedic@localhost", alias="from")
    """From address (also the envelope sender)."""
    to: tuple[Email, ...] = Field(min_length=1)
    """The on-call list; required because an escalation nobody receives is silent."""
    ca_file: ConfigPath | None = None
    """CA bundle for the relay's certificate. Unset: the system's. Certificates are always
    verified (Python's smtplib would not, by default)."""
    max_attachment_mb: float = Field(10, gt=0)
    """Evidence attached up to this total; larger bundles are named (path on the bastion)
    instead, because relays commonly reject mail over 10-25 MB."""
    retry_interval: Duration = 300
    """A failed email is retried this often; the escalation stays recorded on the Node."""
    timeout: Duration = 30
    """Socket timeout per SMTP command; a hung relay must not stall the loop."""

    @field_validator("password")
    @classmethod
    def _no_password(cls, v: Any) -> Any:
        raise ValueError(
            "never put the password in the config file; use password_file or password_credential"
        )

    @model_validator(mode="after")
    def _secret_named(self) -> SmtpConfig:
        if self.user and not (self.password_file or self.password_credential):
            raise ValueError("user is set but neither password_file nor password_credential")
        return self


class MetricsConfig(Section):
    address: str = "127.0.0.1"
    """Loopback: metrics reveal node names; expose through the site's scrape proxy."""
    port: Port = 9847


class LeaderElectionConfig(Section):
    enabled: bool = True
    namespace: str = "fleetmedic"
    """The controller's own namespace, where deploy/controller's Role grants Leases."""
    lease_name: str = "fleetmedic-controller"
    identity: str | None = None
    """Holder identity. Unset: hostname and PID."""
    lease_duration: Duration = 120
    """Longer than client-go's 15 s on purpose: repairs take minutes and fenced nodes stay
    fenced while no one leads, so a 2-minute failover costs little, while renewing every
    2 s would be most of an idle controller's API traffic (target: <= 2 requests/min)."""
    renew_deadline: Duration = 90
    """A leader that cannot renew within this stops acting before its lease can expire."""
    retry_period: Duration = 40
    """How often a follower tries to take over and the leader renews (one PUT each time)."""
    node_lease_duration: Duration = 120
    """Per-node Lease, renewed while a node is worked on; short so a crash frees it soon."""

    @model_validator(mode="after")
    def _ordered(self) -> LeaderElectionConfig:
        if not self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("need retry_period < renew_deadline < lease_duration")
        return self
