"""Config sections: where the cluster is, which taints, what counts as a foreign
signal, SMTP, metrics and leader election. See the package docstring."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

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


class TaintNameConfig(Section):
    key: TaintKey
    value: LabelValue = ""


class TaintsConfig(Section):
    preset: str = "default"
    """`default` (fleetmedic.io/repair=<step>) or `ossci` (repair-reboot, ...), so a fleet
    already fenced with the OSSCI names can be taken over without relabelling."""
    reset: TaintNameConfig | None = None
    """Explicit names override single entries of the preset; unset keeps the preset's."""
    reboot: TaintNameConfig | None = None
    power_cycle: TaintNameConfig | None = None
    reimage: TaintNameConfig | None = None
    manual: TaintNameConfig | None = None
    slow_network: TaintNameConfig | None = None

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


class ForeignSignalConfig(Section):
    kind: Literal["taint", "condition"]
    """`taint` matches a taint key (and value if given); `condition` a NodeCondition type
    whose status equals `value` (default "True")."""
    key: str
    value: str | None = None

    def signal(self) -> ForeignSignal:
        return ForeignSignal(self.kind, self.key, self.value)


DEFAULT_FOREIGN = (
    ForeignSignalConfig(kind="taint", key="trainy.konduktor.ai/faulty"),
    ForeignSignalConfig(kind="taint", key="gpu-healthcheck.aws-samples.io/unhealthy"),
    ForeignSignalConfig(kind="condition", key="GPUProblem", value="True"),
)


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
