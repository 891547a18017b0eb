"""The controller's configuration: one YAML file, validated once at start-up.

Every field's docstring says why its default is what it is (``types.field_docs(Model)``
reads them). :func:`load` turns any problem into a one-line
:class:`~fleetmedic.errors.ConfigError`, e.g.
``config /etc/fleetmedic/controller.yaml: smtp.port: must be 1..65535, got 0``.

- Durations are seconds or strings like ``90s``, ``10m``, ``1h30m``, ``7d``.
- Relative paths are relative to the config file's directory.
- Secrets are never in the file: a path or a systemd credential name
  (``LoadCredential=``, read from ``$CREDENTIALS_DIRECTORY``) points at them.
- :meth:`Config.missing_files` is the start-up check that named files exist.

The annotated example is ``fleetmedic/data/controller.example.yaml``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import PrivateAttr, ValidationError, field_validator, model_validator

from fleetmedic.errors import ConfigError
from fleetmedic.model.config.bmc import BmcConfig
from fleetmedic.model.config.cloud import CloudConfig
from fleetmedic.model.config.clusters import ClusterConfig
from fleetmedic.model.config.domains import DomainConfig
from fleetmedic.model.config.executor import LOCAL, ExecutorConfig, ReceptorConfig
from fleetmedic.model.config.ladder import (
    LADDER_ORDER_WITH_BMC,
    PHASES,
    AnsibleConfig,
    LadderConfig,
    PlaybookConfig,
    PlaybooksConfig,
    StepConfig,
)
from fleetmedic.model.config.notify import NotifyConfig, TargetConfig
from fleetmedic.model.config.nvsentinel import NvsentinelConfig
from fleetmedic.model.config.profiles import DEFAULT_PROFILE, ProfileConfig, deep_merge
from fleetmedic.model.config.safety import BreakerConfig, DrainConfig, FlapConfig, SafetyConfig
from fleetmedic.model.config.sections import (
    DEFAULT_FOREIGN,
    ForeignSignalConfig,
    KubeConfig,
    LeaderElectionConfig,
    MetricsConfig,
    SmtpConfig,
    TaintsConfig,
    expand_foreign,
)
from fleetmedic.model.config.slurm import ClusterKind, SlurmConfig
from fleetmedic.model.config.sources import LokiConfig, SourcesConfig
from fleetmedic.model.config.sweep import SweepConfig
from fleetmedic.model.config.ticket import TicketConfig
from fleetmedic.model.config.types import (
    Section,
    Window,
    credential_path,
    parse_duration,
    quantity_of,
)
from fleetmedic.model.nodestate import ForeignSignal
from fleetmedic.model.settings import first_error, read_yaml
from fleetmedic.model.vocabulary import Vocabulary

__all__ = [
    "DEFAULT_PROFILE",
    "LOCAL",
    "PHASES",
    "AnsibleConfig",
    "BmcConfig",
    "BreakerConfig",
    "CloudConfig",
    "ClusterConfig",
    "Config",
    "DomainConfig",
    "DrainConfig",
    "ExecutorConfig",
    "FlapConfig",
    "ForeignSignalConfig",
    "KubeConfig",
    "LadderConfig",
    "LeaderElectionConfig",
    "LokiConfig",
    "MetricsConfig",
    "NotifyConfig",
    "NvsentinelConfig",
    "PlaybookConfig",
    "PlaybooksConfig",
    "ProfileConfig",
    "ReceptorConfig",
    "SafetyConfig",
    "SmtpConfig",
    "SourcesConfig",
    "StepConfig",
    "SweepConfig",
    "TaintsConfig",
    "TargetConfig",
    "TicketConfig",
    "Window",
    "credential_path",
    "load",
    "parse",
    "parse_duration",
    "quantity_of",
    "secret_path",
]


class Config(Section):
    kind: ClusterKind = "kubernetes"
    """What schedules the nodes: `kubernetes` (the `kube` section says where) or `slurm`
    (the `slurm` section; a drain with our reason is the taint, see slurm.py)."""
    slurm: SlurmConfig | None = None
    """How the controller reaches a `kind: slurm` cluster. Unset with `kind: slurm`: the
    defaults (SLURM_CONF from the environment, every node)."""
    kube: KubeConfig = KubeConfig()
    taints: TaintsConfig = TaintsConfig()
    foreign_signals: tuple[ForeignSignalConfig, ...] = DEFAULT_FOREIGN
    """Other tools' verdicts accepted as entry into `reboot` on a healthy node: Konduktor's
    faulty taint, the AWS GPU health check's taint, node-problem-detector's GPUProblem.
    An entry may name a preset (fleetmedic/data/foreign_presets.yaml): `konduktor`,
    `aws-gpu-healthcheck`, `npd` (the default is these three), `nvsentinel`."""
    nvsentinel: NvsentinelConfig = NvsentinelConfig()
    """fleetmedic as NVSentinel's external remediator (model/config/nvsentinel.py). Off."""
    ladder: LadderConfig = LadderConfig()
    ansible: AnsibleConfig = AnsibleConfig()
    executor: ExecutorConfig = ExecutorConfig()
    """Where playbooks run: here (the default) or on Receptor execution nodes, by a node
    label (see executor.py)."""
    smtp: SmtpConfig | None = None
    """Unset: no email; escalations are only recorded on the Node (and logged loudly)."""
    notify: NotifyConfig = NotifyConfig()
    """Chat and pager targets (Apprise URLs) beside the email; see notify.py."""
    ticket: TicketConfig | None = None
    """A webhook that gets one JSON case per RMA candidate (Jira, ServiceNow, a vendor's
    intake; see ticket.py). Unset: the email carries the case alone."""
    bmc: BmcConfig | None = None
    """How the power_cycle rung reaches each node's BMC (see bmc.py). Unset: no power
    cycles, and a ladder that names power_cycle is refused."""
    cloud: CloudConfig = CloudConfig()
    """How the replace rung (if a ladder has it) hands a node to the cloud (see cloud.py)."""
    safety: SafetyConfig = SafetyConfig()
    sweep: SweepConfig | None = None
    """Diagnostic sweeps of idle nodes on a schedule (see sweep.py). Unset: none."""
    domains: tuple[DomainConfig, ...] = ()
    """Label keys that group nodes failing together (an NVLink domain, a rack), and when
    their fences become one domain incident (see domains.py). Unset: every node is
    repaired alone. Fleet-wide: a profile cannot set its own."""
    metrics: MetricsConfig = MetricsConfig()
    leader_election: LeaderElectionConfig = LeaderElectionConfig()
    sources: SourcesConfig = SourcesConfig()
    """Detectors the controller runs itself (a Loki source; see sources.py)."""
    dry_run: bool = False
    """Decide and log, change nothing (`fleetmedic run --dry-run` sets it too)."""
    profiles: tuple[ProfileConfig, ...] = ()
    """Per-pool ladders, budgets, windows and recipients (see profiles.py). Nodes no profile
    selects use the top level (the `default` profile). Budgets and breakers count per
    profile; `safety.min_healthy` of the top level also holds for the whole fleet."""

    clusters: tuple[ClusterConfig, ...] = ()
    """Several clusters served by this one controller (see clusters.py). Unset: one, the
    top-level `kube`."""

    # the effective config of each named profile, built by parse() (see profiles.py)
    _profiles: dict[str, Config] = PrivateAttr(default_factory=dict)
    # ... and of each cluster (clusters.py); in a cluster's own config, its name
    _clusters: dict[str, Config] = PrivateAttr(default_factory=dict)
    _cluster_name: str | None = PrivateAttr(default=None)

    def cluster_names(self) -> tuple[str, ...]:
        """The configured clusters' names; () when this config is one cluster."""
        return tuple(c.name for c in self.clusters)

    def cluster(self, name: str) -> Config:
        """The effective config of cluster ``name``."""
        try:
            return self._clusters[name]
        except KeyError:
            known = ", ".join(self._clusters) or "none configured"
            raise ConfigError(f"no cluster {name!r} (known: {known})") from None

    @property
    def cluster_name(self) -> str | None:
        """This cluster's name, in a cluster's effective config (else None)."""
        return self._cluster_name

    @field_validator("foreign_signals", mode="before")
    @classmethod
    def _foreign_presets(cls, v: Any) -> Any:
        return expand_foreign(v)

    @model_validator(mode="before")
    @classmethod
    def _power_cycle_by_default(cls, data: Any) -> Any:
        """With a `bmc:` section and no `ladder.order`, power_cycle follows reboot."""
        if isinstance(data, Mapping) and data.get("bmc") is not None:
            ladder = data.get("ladder") or {}
            if isinstance(ladder, Mapping) and "order" not in ladder:
                return {**data, "ladder": {**ladder, "order": list(LADDER_ORDER_WITH_BMC)}}
        return data

    @model_validator(mode="after")
    def _bmc_for_power_cycle(self) -> Config:
        if "power_cycle" in self.ladder.order and self.bmc is None:
            raise ValueError(
                "ladder.order names power_cycle but there is no `bmc:` section "
                "(how to reach the nodes' BMCs)"
            )
        return self

    @model_validator(mode="after")
    def _domains_known(self) -> Config:
        keys = [d.key for d in self.domains]
        dup = next((k for k in keys if keys.count(k) > 1), None)
        if dup:
            raise ValueError(f"domains: the key {dup!r} is listed twice")
        names = {t.name for t in self.notify.targets}
        for i, d in enumerate(self.domains):
            unknown = next((t for t in d.targets if t not in names), None)
            if unknown:
                raise ValueError(
                    f"domains.{i}.targets: {unknown!r} is not one of notify.targets "
                    f"({', '.join(sorted(names)) or 'none configured'})"
                )
            if d.to and self.smtp is None:
                raise ValueError(f"domains.{i}.to: set, but there is no `smtp:` section")
        return self

    @model_validator(mode="after")
    def _slurm_fits(self) -> Config:
        if self.kind != "slurm":
            if self.slurm is not None and not self.clusters:
                raise ValueError("slurm: set, but kind is kubernetes (add `kind: slurm`)")
            if self.ladder.reboot_via == "slurm":
                raise ValueError("ladder.reboot_via: slurm needs `kind: slurm`")
            return self
        # what the loop would need from Kubernetes and a Slurm node does not have
        unsupported = [
            ("sweep", self.sweep is not None and self.sweep.enabled, "sweeps need pods"),
            ("nvsentinel", self.nvsentinel.enabled, "NVSentinel hands over Kubernetes Nodes"),
            ("domains", bool(self.domains), "domains group nodes by Kubernetes labels"),
            ("ladder.order: replace", "replace" in self.ladder.order, "replace deletes the Node"),
        ]
        for what, present, why in unsupported:
            if present:
                raise ValueError(f"kind: slurm: {what} is not supported on Slurm ({why})")
        return self

    def slurm_settings(self) -> SlurmConfig:
        """The `slurm` section, or its defaults."""
        return self.slurm or SlurmConfig()

    def profile(self, name: str) -> Config:
        """The effective config of profile ``name`` (``default``: this one)."""
        if name == DEFAULT_PROFILE:
            return self
        try:
            return self._profiles[name]
        except KeyError:
            known = ", ".join([DEFAULT_PROFILE, *self._profiles])
            raise ValueError(f"no profile {name!r} (known: {known})") from None

    def profile_names(self) -> tuple[str, ...]:
        """Every profile, the configured ones first, ``default`` last."""
        return (*(p.name for p in self.profiles), DEFAULT_PROFILE)

    def sweeps(self) -> bool:
        """True when some profile sweeps idle nodes (the controller then watches pods)."""
        return any(
            (c := self.profile(n).sweep) is not None and c.enabled for n in self.profile_names()
        )

    def vocabulary(self) -> Vocabulary:
        return self.taints.vocabulary()

    def foreign(self) -> tuple[ForeignSignal, ...]:
        return tuple(f.signal() for f in self.foreign_signals)

    def read_annotations(self) -> frozenset[str]:
        """Node annotations outside ``fleetmedic.io/`` that the controller reads from its
        views: every profile's BMC address annotation (``bmc.address_from: annotation``).
        Its views keep these and its own, and drop the rest (nodestate.own_annotations)."""
        return frozenset(
            c.bmc.address_key
            for c in (self.profile(n) for n in self.profile_names())
            if c.bmc is not None and c.bmc.address_from == "annotation"
        )

    def playbook_path(self, phase_playbook: PlaybookConfig) -> Path:
        return self.ansible.playbook_dir / phase_playbook.playbook

    def missing_files(self, environ: Mapping[str, str] = os.environ) -> list[str]:
        """Start-up check: named files that do not exist, as ``field: path`` strings."""
        every = [self.profile(n) for n in self.profile_names()]
        wanted: list[tuple[str, Path | None]] = [
            (f"ladder.playbooks.{name}", c.playbook_path(book))
            for c in every
            for name, book in c.ladder.playbooks_used().items()
        ]
        wanted += [
            ("sweep.playbook", self.ansible.playbook_dir / c.sweep.playbook)
            for c in every
            if c.sweep and c.sweep.enabled
        ]
        wanted += [
            ("ladder.quarantine.playbook", self.ansible.playbook_dir / c.ladder.quarantine.playbook)
            for c in every
            if c.ladder.quarantine.enabled
        ]
        wanted += [
            ("ladder.burnin.playbook", self.ansible.playbook_dir / c.ladder.burnin.playbook)
            for c in every
            if c.ladder.burnin.enabled
        ]
        wanted += [
            (f"domains.{i}.action.playbook", self.ansible.playbook_dir / d.playbook.playbook)
            for i, d in enumerate(self.domains)
            if d.playbook is not None
        ]
        wanted += [
            ("ansible.config_file", self.ansible.config_file),
            (
                "ansible.ssh_key",
                secret_path(self.ansible.ssh_key_file, self.ansible.ssh_key_credential, environ),
            ),
            (
                "kube.kubeconfig",
                secret_path(self.kube.kubeconfig, self.kube.kubeconfig_credential, environ),
            ),
        ]
        wanted += [
            (
                "smtp.password",
                secret_path(c.smtp.password_file, c.smtp.password_credential, environ),
            )
            for c in every
            if c.smtp
        ]
        wanted += [
            (f"notify.targets.{t.name}.url", secret_path(t.url_file, t.url_credential, environ))
            for c in every
            for t in c.notify.targets
        ]
        wanted += [
            (
                "ladder.lemon.rma.playbook",
                self.ansible.playbook_dir / c.ladder.lemon.rma.playbook,
            )
            for c in every
            if c.ladder.lemon.enabled
        ]
        for c in every:
            if c.ticket is not None:
                t = c.ticket
                wanted.append(("ticket.url", secret_path(t.url_file, t.url_credential, environ)))
                wanted.append(
                    ("ticket.headers", secret_path(t.headers_file, t.headers_credential, environ))
                )
                wanted.append(("ticket.template_file", t.template_file))
        wanted += [
            (f"bmc.{what}", path)
            for c in every
            if c.bmc and "power_cycle" in c.ladder.order
            for what, path in (
                ("username", c.bmc.username_path(environ)),
                ("password", c.bmc.password_path(environ)),
                ("addresses_file", c.bmc.addresses_file),
            )
        ]
        missing = [f"{name}: {path}" for name, path in wanted if path and not path.exists()]
        return list(dict.fromkeys(missing))


def parse(data: Any, source: str = "config", base: Path | None = None) -> Config:
    """Validate already-loaded YAML data; ConfigError (one line) on any problem."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: must be a mapping at the top level")
    try:
        cfg = Config.model_validate(data, context={"base": base})
    except ValidationError as exc:
        raise ConfigError(f"{source}: {first_error(exc, _all_names)}") from None
    names = [p.name for p in cfg.profiles]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise ConfigError(f"{source}: profiles: the name {dup!r} is used twice")
    if cfg.clusters:
        _build_clusters(cfg, data, source, base)
    # (domains are fleet-wide: read from the top level only, checked against its targets)
    top = {k: v for k, v in data.items() if k not in ("profiles", "clusters", "domains")}
    for i, p in enumerate(cfg.profiles):
        try:
            cfg._profiles[p.name] = Config.model_validate(
                deep_merge(top, p.overrides()), context={"base": base}
            )
        except ValidationError as exc:
            raise ConfigError(
                f"{source}: profiles.{i} ({p.name}): {first_error(exc, _all_names)}"
            ) from None
    return cfg


def _build_clusters(cfg: Config, data: Mapping[str, Any], source: str, base: Path | None) -> None:
    names = [c.name for c in cfg.clusters]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise ConfigError(f"{source}: clusters: the name {dup!r} is used twice")
    top = {k: v for k, v in data.items() if k != "clusters"}
    for i, c in enumerate(cfg.clusters):
        own_dirs: dict[str, Any] = {
            "ansible": {
                "run_dir": str(cfg.ansible.run_dir / c.name),
                "evidence_dir": str(cfg.ansible.evidence_dir / c.name),
            }
        }
        if (c.kind or cfg.kind) == "slurm":
            state = (c.slurm or {}).get("state_dir") or (cfg.slurm_settings().state_dir / c.name)
            own_dirs["slurm"] = {"state_dir": str(state)}
        merged = deep_merge(deep_merge(top, c.overrides()), own_dirs)  # (lists replace)
        if merged.get("kind", "kubernetes") != "slurm":
            merged.pop("slurm", None)  # (the top level's, for the Slurm clusters beside it)
        sub = parse(merged, f"{source}: clusters.{i} ({c.name})", base)
        for member in (sub, *sub._profiles.values()):
            member._cluster_name = c.name
        cfg._clusters[c.name] = sub


def load(path: str | os.PathLike[str]) -> Config:
    """Read and validate the config file."""
    path = Path(path)
    return parse(read_yaml(path, "config"), f"config {path}", path.parent.absolute())


def secret_path(
    file: Path | None, credential: str | None, environ: Mapping[str, str] = os.environ
) -> Path | None:
    """The file holding a secret: the systemd credential if named, else the file."""
    return credential_path(credential, environ) if credential else file


def _all_names(_loc: tuple[Any, ...]) -> list[str]:
    """Every key of the controller's config (for "did you mean" on an unknown one)."""
    models: list[type[Section]] = [Config]
    names: set[str] = set()
    while models:
        model = models.pop()
        for name, field in model.model_fields.items():
            names.add(field.alias or name)
            for sub in (*getattr(field.annotation, "__args__", ()), field.annotation):
                if isinstance(sub, type) and issubclass(sub, Section) and sub is not model:
                    models.append(sub)
    return sorted(names)
