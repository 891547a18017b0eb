"""Config sections for the ladder (steps, phases, playbooks) and for Ansible."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from fleetmedic.model.config.lemon import LemonConfig
from fleetmedic.model.config.partition import RestoreConfig
from fleetmedic.model.config.types import ConfigPath, Duration, Section
from fleetmedic.model.vocabulary import REPAIR_STATES

Phase = Literal[
    "diagnose",
    "diagnostics",
    "drain",
    "drain_gpu",
    "reset",
    "reboot",
    "power_cycle",
    "reinstall",
    "restore",
    "verify",
    "notify",
    "replace",
]
PHASES: tuple[str, ...] = Phase.__args__  # type: ignore[attr-defined]
"""``drain`` cordons and evicts every pod the drain rules allow; ``drain_gpu`` only the pods
that use a GPU (a GPU reset does not disturb the rest). Every other phase runs the playbook
of the same name (``reinstall``: the vendor's). ``reboot`` and ``power_cycle`` boot the node:
its boot_id is read before, so a restart mid-way can tell whether the boot happened.
``diagnose`` captures evidence (playbooks/diagnose.yml) before a repair may wipe it; not to
be confused with ``diagnostics``, the phase of the ``diagnose`` *state* (the mildest fence)
that runs the vendor's diagnostics on the fenced node (``fleetmedic diag``: DCGM or RVS at
``ladder.diagnose_level``, through the quarantine's playbook) and is judged by
policy/diagnose.py. ``restore`` puts back the GPU partition layout (MIG instances, AMD
compute and memory partitions) the ``diagnose`` phase recorded before the repair
(playbooks/restore.yml, policy/partition.py) and reads it back; where the record says the
node had no partitions it is passed over without a run. ``notify`` sends the email (and
chat) that the node is being replaced, with its evidence, while the Node and its
annotations still exist; ``replace`` hands the
node to its cloud (cloud.py) and ends its life: no verify follows."""
BOOTING_PHASES = ("reboot", "power_cycle")
ENDINGS: tuple[tuple[str, ...], ...] = (("verify",), ("notify", "replace"))
"""How a step's phases may end: in a verify (the node returns to service when it passes),
or in the hand-off to the cloud (the node's life ends; the email goes out before it)."""


class StepConfig(Section):
    phases: tuple[Phase, ...]
    """What one attempt does, in order. It must end in `verify`: only a passing verify
    clears a node, never "the reboot returned". The replace rung's ends in `notify, replace`
    instead (and only its may)."""
    retries: int = Field(0, ge=0, le=5)
    """Extra attempts of this step before climbing. 0: a second identical reboot rarely
    fixes what the first did not, and each attempt costs the node's jobs."""

    @field_validator("phases")
    @classmethod
    def _ends_in_verify(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        end = ending(v)
        if end is None or len(set(v)) != len(v) or any(p in v[: -len(end)] for p in ENDING_PHASES):
            raise ValueError(
                f"must be distinct phases ending in verify (or in notify, replace), got {list(v)}"
            )
        return v

    @property
    def terminal(self) -> bool:
        """True when an attempt ends the node's life (the hand-off) instead of a verify."""
        return ending(self.phases) != ("verify",)


ENDING_PHASES = frozenset(p for e in ENDINGS for p in e)


def ending(phases: tuple[str, ...]) -> tuple[str, ...] | None:
    """Which of :data:`ENDINGS` ``phases`` ends in (None: none of them)."""
    return next((e for e in ENDINGS if len(phases) > len(e) and phases[-len(e) :] == e), None)


class PlaybookConfig(Section):
    playbook: str
    """Path relative to ansible.playbook_dir (or absolute)."""
    timeout: Duration | None = None
    """Job timeout for this phase (ansible-runner timeout=). Unset: ansible.job_timeout."""


class PlaybooksConfig(Section):
    """The collection's playbooks. Each gets ``fleetmedic_request_id`` (stable per node,
    episode, step and attempt), which the reboot and driver roles use to act once per
    request, so re-running a phase after a crash never reboots or reinstalls twice."""

    diagnose: PlaybookConfig = PlaybookConfig(playbook="diagnose.yml", timeout=900)
    """Evidence capture; 15 min covers nvidia-bug-report (up to 10 min) on an 8-GPU node."""
    reset: PlaybookConfig = PlaybookConfig(playbook="reset.yml", timeout=600)
    """GPU reset in place (roles/gpu_reset): seconds per GPU; 10 min leaves room for a fabric
    manager restart and the post-reset health check on an 8-GPU NVSwitch node."""
    reboot: PlaybookConfig = PlaybookConfig(playbook="reboot.yml", timeout=1200)
    """20 min: a GPU server's POST plus memory training can take 10+ minutes. Also how long
    a node may stay unreachable after a reboot began before it counts as failed."""
    reinstall_nvidia: PlaybookConfig = PlaybookConfig(playbook="reimage.yml", timeout=3600)
    """Driver reinstall incl. DKMS build and the reboot it needs (reimage.yml reboots itself,
    which is why the default reimage step has no separate reboot phase)."""
    reinstall_amd: PlaybookConfig = PlaybookConfig(playbook="reimage.yml", timeout=3600)
    """ROCm reinstall (amdgpu-dkms); the same playbook picks the stack by fleetmedic_vendor."""
    diagnostics: PlaybookConfig = PlaybookConfig(playbook="quarantine.yml", timeout=1200)
    """The diagnose state's vendor diagnostics: the quarantine's playbook (one run path for
    `fleetmedic diag`), without the fabric checks. 20 min covers level 2 (DCGM's own limit
    for it is about 10 min, the playbook's 11) and an SSH login on a loaded node; raise it
    to an hour with diagnose_level 3."""
    restore: PlaybookConfig = PlaybookConfig(playbook="restore.yml", timeout=900)
    """The GPU partition layout the diagnose phase recorded (roles/gpu_partition). 15 min: an
    AMD memory-partition change reloads amdgpu (about a minute on 8 GPUs), and mig-parted
    on an A100 resets each GPU whose MIG mode changes."""
    verify: PlaybookConfig = PlaybookConfig(playbook="verify.yml", timeout=600)
    """The same checks the agent runs (`fleetmedic check`), so pass means what fencing meant."""
    power_cycle: PlaybookConfig = PlaybookConfig(playbook="power_cycle.yml", timeout=1800)
    """Power off and on through the node's BMC; a cold boot takes longer than a warm one."""
    replace: PlaybookConfig = PlaybookConfig(playbook="replace.yml", timeout=600)
    """The Auto Scaling hand-off (cloud.replace_via: auto_scaling_group), run on the
    controller's host: a few API calls, 10 min covers the AWS SDK's retries."""

    def for_phase(self, phase: str, vendor: str) -> PlaybookConfig | None:
        """The playbook a phase runs (None: a drain, or a reinstall with no known vendor)."""
        if phase == "reinstall":
            return {"nvidia": self.reinstall_nvidia, "amd": self.reinstall_amd}.get(vendor)
        if phase == "notify":
            return None
        return getattr(self, phase, None)

    def for_phases(self, phases: tuple[str, ...]) -> dict[str, PlaybookConfig]:
        """Every playbook ``phases`` may run, by field name (both reinstalls for ``reinstall``)."""
        names = [
            n
            for p in phases
            for n in (("reinstall_nvidia", "reinstall_amd") if p == "reinstall" else (p,))
            if n in type(self).model_fields
        ]
        return {n: getattr(self, n) for n in names}


Rung = Literal["diagnose", "reset", "reboot", "power_cycle", "reimage", "replace", "manual"]
LADDER_ORDER: tuple[Rung, ...] = ("diagnose", "reset", "reboot", "reimage", "manual")
LADDER_ORDER_WITH_BMC: tuple[Rung, ...] = (
    "diagnose",
    "reset",
    "reboot",
    "power_cycle",
    "reimage",
    "manual",
)
"""The default order once the config has a `bmc:` section (Config sees to it)."""
assert Rung.__args__ == REPAIR_STATES, "the rungs are the vocabulary's repair states"  # type: ignore[attr-defined]


DIAG_RUN_SECONDS: dict[int, int] = {1: 180, 2: 660, 3: 2760, 4: 7260, 5: 21660}
"""How long quarantine.yml waits for a `fleetmedic diag` run of each level (its
`quarantine_timeouts`: the tools' documented run lengths with room). A playbook timeout
below this kills every run of that level, which then counts as unknown."""
DIAG_LOGIN_ROOM = 120
"""Seconds on top of the run for the playbook's SSH logins and polls on a loaded node."""


def diag_timeout_needed(level: int) -> int:
    return DIAG_RUN_SECONDS[level] + DIAG_LOGIN_ROOM


class QuarantineConfig(Section):
    """The quarantine rung (issue 20 part 5): deep diagnostics and the fabric checks before
    a node that keeps failing the same way returns to service, with a recommendation
    (return to service, or replace) kept in its ``fleetmedic.io/quarantine`` annotation."""

    enabled: bool = False
    """Quarantine automatically (by `count` and `window`). Off by default: it needs dcgmi
    or rvs on the nodes, and a level-3 run holds a repaired node out of service for half
    an hour or more; without the tools every such node would end in `manual`. A
    `fleetmedic quarantine NODE` request is honoured either way."""
    count: int = Field(2, ge=1, le=20)
    """A repair that is the `count`-th return to service for the same fault (the same
    catalog rule, e.g. Xid 79) within `window` is held for quarantine. 2, as the issue
    asks: the second time is the first sign the repair does not cure the cause."""
    window: Duration = Field(7 * 86400, ge=60)
    """7 days: a fault that recurs within a week is the same fault."""
    level: int = Field(3, ge=1, le=5)
    """``dcgmi diag -r`` (1-4) or ``rvs -r`` (1-5) level. 3 (about 30 min): DCGM's
    hardware stress tests; 4 adds hours of burn-in (the AWS suite's quarantine job)."""
    playbook: str = "quarantine.yml"
    """Path relative to ansible.playbook_dir (or absolute)."""
    timeout: Duration = Field(3600, ge=10)
    """The whole run: DCGM's level 3 takes about 30 minutes (its own limit is 46). Left
    unset, it grows with `level` to fit that level's run (level 4: 2 h 3 min); set shorter
    than the run, it is a config error (every run would time out and count as unknown)."""

    @model_validator(mode="before")
    @classmethod
    def _timeout_follows_level(cls, data: Any) -> Any:
        if isinstance(data, dict) and "timeout" not in data:
            level = data.get("level", 3)
            if isinstance(level, int) and level in DIAG_RUN_SECONDS:
                return {**data, "timeout": max(3600, diag_timeout_needed(level))}
        return data


COLLECTIVE_SECONDS = 300
"""Room for the burn-in's collective test (all_reduce_perf from 8 B to 1 GiB, 20 iterations
a size: about a minute on 8 GPUs) and its SSH logins on a loaded node."""
VERIFY_RUNGS = ("diagnose", "reset", "reboot", "power_cycle", "reimage")
"""The rungs whose attempts end in a verify (the replace rung's ends the node's life)."""


def burnin_timeout_needed(level: int) -> int:
    return diag_timeout_needed(level) + COLLECTIVE_SECONDS


class BurnInConfig(Section):
    """The return gate's burn-in (issue 30, policy/burnin.py): when a rung's verify passes,
    `fleetmedic diag` at ``diag_level`` and a single-node all-reduce (nccl-tests' or
    rccl-tests' all_reduce_perf) whose bus bandwidth is compared with the node's hardware
    profile (``expected_busbw_gbps``, within its tolerance), through playbooks/burnin.yml.
    A failure climbs the ladder like a failed verify. Per pool: a profile turns it on with
    ``ladder: {burnin: {enabled: true}}``."""

    enabled: bool = False
    """Off by default: it holds every repaired node out of service for the diagnostics'
    run (a level-2 DCGM run takes minutes), and needs the tools and an
    ``expected_busbw_gbps`` in the node's hardware profile; a node without them fails the
    gate (unknown is never a pass). Pools that run large collective jobs turn it on."""
    diag_level: int = Field(2, ge=1, le=5)
    """``fleetmedic diag --level``: 2 (minutes of DCGM's or RVS's short functional tests)
    proves the GPUs under load without the half hour of level 3 (quarantine's)."""
    playbook: str = "burnin.yml"
    """Path relative to ansible.playbook_dir (or absolute)."""
    timeout: Duration | None = None
    """The whole gate on any rung (both tests and the logins). Unset: long enough for a
    ``diag_level`` run plus the collective test (20 min at level 2). Shorter than that is a
    config error: every run would time out and climb."""
    timeouts: dict[Rung, Duration] = Field(default_factory=dict)
    """Per rung, replacing ``timeout`` there (e.g. ``{reimage: 40m}``: a node fresh from a
    driver reinstall may run the first collective slower while it builds its caches)."""
    hardware_profile: str | None = None
    """Compare with this hardware profile by name (the node's shipped or operator profiles),
    whatever the node's labels say. Unset: the profile whose ``match`` holds the node's
    ``hardware_label`` value, else the node's own check config's profile."""
    hardware_label: str = "node.kubernetes.io/instance-type"
    """The Node label whose value picks the hardware profile (the agent's default,
    checks/hwprofile.py DEFAULT_LABEL)."""

    @model_validator(mode="after")
    def _long_enough(self) -> BurnInConfig:
        need = burnin_timeout_needed(self.diag_level)
        given = {"timeout": self.timeout} | {f"timeouts.{r}": t for r, t in self.timeouts.items()}
        for key, value in given.items():
            if value is not None and value < need:
                raise ValueError(
                    f"{key} ({value:g}s) is shorter than a level-{self.diag_level} diag run "
                    f"and the collective test: at least {need}s"
                )
        bad = sorted(set(self.timeouts) - set(VERIFY_RUNGS))
        if bad:
            raise ValueError(f"timeouts: no burn-in on {', '.join(bad)} (no verify ends it)")
        return self

    def timeout_for(self, rung: str) -> float:
        """How long the gate may take on ``rung``."""
        t = self.timeouts.get(rung, self.timeout)  # type: ignore[call-overload]
        return t if t is not None else max(1200, burnin_timeout_needed(self.diag_level))


class LadderConfig(Section):
    reboot_via: Literal["ansible", "slurm"] = "ansible"
    """On a `kind: slurm` cluster, who reboots at the reboot rung: `ansible`, our reboot
    role over SSH (as on Kubernetes), or `slurm`: `scontrol reboot ASAP nextstate=down`,
    which runs the site's RebootProgram and keeps the node out of service until our checks
    pass and we resume it (kinds/slurmreboot.py). The other rungs always use the roles."""
    order: tuple[Rung, ...] = LADDER_ORDER
    """The rungs, mildest first, ending in `manual`. A failed rung climbs to the next. A node
    fenced at a rung this list leaves out starts on the next rung up (never a milder one).
    `power_cycle` needs the `bmc` section; with one and no `order` given, the default is
    diagnose, reset, reboot, power_cycle, reimage, manual (a cold boot before a reinstall,
    as operators do).

    `diagnose` is a rung only nodes fenced at it enter (a finding that calls for the vendor
    diagnostics, not a repair: NVIDIA's WORKFLOW_XID_13/31); nothing climbs into it. In the
    default order so such nodes get their diagnostics; a pool whose nodes lack dcgmi and
    rvs leaves it out, and its diagnose-fenced nodes start at the pool's first repair rung
    (with the tools missing every run would be unknown, which enters that rung anyway). A
    failed diagnostic enters the rung its test maps to (data/diag_catalog.yaml), never a
    milder one than the first repair rung after `diagnose`."""
    diagnose: StepConfig = StepConfig(phases=("drain_gpu", "diagnostics", "verify"))
    """The diagnose state (policy/diagnose.py): the vendor diagnostics on the fenced node,
    then the checks. The pods using the GPUs leave first: DCGM's level 2 and higher stress
    every GPU (memory, PCIe, SM and power tests) and want them to themselves (a job still
    on them makes tests fail or skip, and the stress would slow or crash the job); the
    repair taint only keeps new pods away. Pods without a GPU stay, as for a reset. No
    evidence capture (`diagnose` phase): nothing here wipes evidence, and a failure enters
    a rung that captures it first. Pass: the node returns untouched (no reboot, no reset),
    its taint and our cordon off."""
    diagnose_level: int = Field(2, ge=1, le=5)
    """`dcgmi diag -r` (1-4) / `rvs -r` (1-5) level of the diagnose state. 2: a few minutes
    of DCGM's short functional tests (PCIe, memory, a targeted stress), which is what
    NVIDIA's WORKFLOW_XID_13/31 ask for first ("run DCGM diagnostics"); 3 holds every such
    node out of service for about half an hour, for a finding that is often the job's
    fault, and is what the quarantine rung is for."""
    reset: StepConfig = StepConfig(phases=("diagnose", "drain_gpu", "reset", "restore", "verify"))
    """Only the pods using the GPUs leave; a refused or failed reset climbs to reboot. Every
    repair rung restores the partition layout before its verify: a reset, a reboot, a cold
    boot and a reinstall can each lose MIG instances or AMD partitions."""
    reboot: StepConfig = StepConfig(phases=("diagnose", "drain", "reboot", "restore", "verify"))
    """Evidence before the reboot wipes it; drain so running jobs end cleanly."""
    power_cycle: StepConfig = StepConfig(
        phases=("diagnose", "drain", "power_cycle", "restore", "verify")
    )
    """A cold boot through the BMC, for what a warm reboot does not cure (a GPU off the bus)."""
    reimage: StepConfig = StepConfig(phases=("diagnose", "drain", "reinstall", "restore", "verify"))
    """The driver or ROCm (by the node's gpu-vendor label) is reinstalled and the node booted
    into it by the reinstall playbook; add a `reboot` phase if yours does not reboot."""
    replace: StepConfig = StepConfig(phases=("diagnose", "drain", "notify", "replace"))
    """Replace, don't repair (cloud pools; put it in `order` in place of reimage): evidence,
    cordon and drain, the email that says the node is being replaced (while its evidence is
    still on the Node), then the hand-off of cloud.replace_via. Held by
    safety.max_replacements_per_day; a failed hand-off climbs to manual."""
    replace_manual: bool = False
    """With `replace` in `order`: a node fenced at `manual` (a finding that needs hands, such
    as a row-remap failure) is replaced instead of escalated, as the AWS suite's "replace,
    don't repair" does. Off by default: a person who taints a node `manual` means a person.
    A failed hand-off still ends in `manual` and its email."""
    playbooks: PlaybooksConfig = PlaybooksConfig()
    burnin: BurnInConfig = BurnInConfig()
    """The burn-in before a repaired node returns (policy/burnin.py); off by default."""
    restore: RestoreConfig = RestoreConfig()
    """The restore phase's operator-managed path (model/config/partition.py)."""
    quarantine: QuarantineConfig = QuarantineConfig()
    """Deep diagnostics before a node repaired again for the same fault returns to service
    (policy/quarantine.py)."""
    lemon: LemonConfig = LemonConfig()
    """A GPU whose faults keep coming back goes to a human as an RMA candidate, with the
    case its vendor asks for (policy/lemon.py, data/lemon_rules.yaml)."""
    probe_timeout: Duration = 60
    """Reading a node's boot_id over SSH; a minute covers a slow SSH login."""
    probe_interval: Duration = 15
    """A node unreachable while a phase interrupted by a controller restart may still be
    rebooting is tried again this often (until that phase's timeout)."""
    foreign_grace: Duration = 600
    """No longer used: each foreign signal's `after_repair` lifecycle (clear, or
    wait-for-change) replaced this grace period, which repaired a node again and again when
    the other tool never cleared its signal. Kept so that older config files still load."""
    history_limit: int = Field(40, ge=8, le=200)
    """Attempts kept in the history annotation; 40 (at most ~17 KB) keeps several episodes
    for flap damping, far below the 256 KB all annotations of a Node share."""

    @field_validator("order")
    @classmethod
    def _order(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        ranks = [REPAIR_STATES.index(s) for s in v]
        if not v or v[-1] != "manual" or ranks != sorted(set(ranks)):
            raise ValueError(
                f"must be distinct rungs in the order {', '.join(REPAIR_STATES)}, ending in "
                f"manual, got {list(v)}"
            )
        return v

    @model_validator(mode="before")
    @classmethod
    def _diagnostics_timeout_follows_level(cls, data: Any) -> Any:
        """Left unset, the diagnose state's timeout is long enough for its level's run."""
        if not isinstance(data, dict):
            return data
        level = data.get("diagnose_level", 2)
        books = data.get("playbooks")
        if not isinstance(level, int) or level not in DIAG_RUN_SECONDS:
            return data  # (the field's own validation says what is wrong)
        if isinstance(books, dict) and "diagnostics" in books:
            return data
        need = diag_timeout_needed(level)
        if need <= (PlaybooksConfig().diagnostics.timeout or 0):
            return data
        books = dict(books) if isinstance(books, dict) else {}
        books["diagnostics"] = {"playbook": "quarantine.yml", "timeout": need}
        return {**data, "playbooks": books}

    @model_validator(mode="after")
    def _diagnostics_fit_their_level(self) -> LadderConfig:
        """A diagnostics timeout shorter than its level's run would judge every run unknown
        (and leave the tool loading the GPUs while the next rung starts): a config error."""
        need = diag_timeout_needed(self.diagnose_level)
        timeout = self.playbooks.diagnostics.timeout  # (None: ansible.job_timeout, not ours)
        if timeout is not None and timeout < need:
            raise ValueError(
                f"playbooks.diagnostics.timeout ({timeout:g}s) is "
                f"shorter than a level-{self.diagnose_level} run (diagnose_level): at least "
                f"{need}s"
            )
        q = self.quarantine
        if q.timeout < diag_timeout_needed(q.level):
            raise ValueError(
                f"quarantine.timeout ({q.timeout:g}s) is shorter than a level-{q.level} run: "
                f"at least {diag_timeout_needed(q.level)}s"
            )
        return self

    @model_validator(mode="after")
    def _terminal_only_last(self) -> LadderConfig:
        """Only the replace rung may end a node's life, and only it must."""
        if self.replace_manual and "replace" not in self.order:
            raise ValueError("replace_manual needs the replace rung in `order`")
        for rung in ("diagnose", "reset", "reboot", "power_cycle", "reimage", "replace"):
            if self.step(rung).terminal != (rung == "replace"):
                want = "notify, replace" if rung == "replace" else "verify"
                raise ValueError(f"{rung}: its phases must end in {want}")
        return self

    def first_repair(self) -> str:
        """The first rung that repairs (not `diagnose`): where a node whose diagnostics
        failed in a way no test names, or could not tell, enters; `manual` if none."""
        return next((r for r in self.order if r != "diagnose"), "manual")

    def rungs(self) -> tuple[str, ...]:
        """The rungs that run playbooks (all but `manual`)."""
        return tuple(s for s in self.order if s != "manual")

    def step(self, rung: str) -> StepConfig:
        return getattr(self, rung)

    def playbooks_used(self) -> dict[str, PlaybookConfig]:
        """Every playbook the configured rungs may run, by field name."""
        phases = tuple(p for r in self.rungs() for p in self.step(r).phases)
        return self.playbooks.for_phases(phases)


_HOST_KEY_OPTIONS = re.compile(r"StrictHostKeyChecking|UserKnownHostsFile", re.I)
_FALSE_WORDS = frozenset({"false", "no", "off", "0", "n", "f"})


class AnsibleConfig(Section):
    playbook_dir: ConfigPath = Path("/usr/share/fleetmedic/playbooks")
    """Where the controller role installs the collection's playbooks."""
    config_file: ConfigPath | None = None
    """ansible.cfg to use (ANSIBLE_CONFIG); the controller role installs one with the
    collection and roles paths. Unset: Ansible's own search order."""
    run_dir: ConfigPath = Path("/var/lib/fleetmedic/runs")
    """A fresh private_data_dir per run is made here (the unit's StateDirectory)."""
    evidence_dir: ConfigPath = Path("/var/lib/fleetmedic/evidence")
    """Where the diagnostics role fetches evidence bundles (<dir>/<node>/*.tar.gz); the
    escalation email attaches them."""
    keep_runs: int = Field(500, ge=1)
    """Run directories kept for post-mortems; the oldest go first."""
    remote_user: str | None = None
    """SSH user. Unset: Ansible's default (ansible.cfg, else the local user)."""
    become: bool = False
    """Use become (sudo) on nodes; off because the usual setup logs in as root."""
    ssh_key_file: ConfigPath | None = None
    """Private key for SSH. Unset: ssh's own defaults / agent."""
    ssh_key_credential: str | None = None
    """systemd credential holding the SSH key; wins over ssh_key_file."""
    known_hosts_file: ConfigPath = Path("/var/lib/fleetmedic/known_hosts")
    """Host keys checked strictly: a node whose key changed is not trusted with root."""
    extra_ssh_args: tuple[str, ...] = ()
    """Appended to ansible_ssh_common_args, e.g. ["-o", "ProxyJump=bastion2"]."""
    server_alive_interval: int = Field(3, ge=1)
    """With server_alive_count_max, a node that vanishes mid-task fails in ~30 s instead of
    hanging 10+ minutes (measured)."""
    server_alive_count_max: int = Field(2, ge=1)
    """Unanswered keepalives before ssh gives up (see server_alive_interval)."""
    forks: int = Field(20, ge=1, le=500)
    """Hosts per run in parallel; the budget keeps runs small, 20 is Ansible's common value."""
    job_timeout: Duration = 3600
    """Backstop for any run whose phase sets no timeout: a hung ssh never blocks forever."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment for ansible-playbook (e.g. ANSIBLE_STDOUT_CALLBACK). It cannot turn
    off host key checking, nor choose a strategy plugin (see _env_keeps_safety)."""

    @model_validator(mode="after")
    def _known_hosts_on(self) -> AnsibleConfig:
        bad = [a for a in self.extra_ssh_args if _HOST_KEY_OPTIONS.search(a)]
        if bad:
            raise ValueError(
                "extra_ssh_args must not change host key checking "
                f"(use known_hosts_file), got {bad[0]!r}"
            )
        return self

    @model_validator(mode="after")
    def _env_keeps_safety(self) -> AnsibleConfig:
        """ansible.env reaches ansible-playbook after our own variables (adapters/runner.py),
        so it could undo what the fields above guarantee: refused, one line each."""
        for key, value in self.env.items():
            if key == "ANSIBLE_HOST_KEY_CHECKING" and value.strip().lower() in _FALSE_WORDS:
                raise ValueError(
                    f"env: {key}={value!r} would trust any host key with root on the nodes "
                    "(add the nodes' keys to known_hosts_file)"
                )
            if "SSH" in key and _HOST_KEY_OPTIONS.search(value):
                raise ValueError(
                    f"env: {key} must not change host key checking (use known_hosts_file)"
                )
            # Measured (session 17, mitogen 0.3.54): its own SSH keepalive (30 s x 10) comes
            # first on ssh's command line, so a node lost mid-task went unnoticed past a
            # 150 s job timeout, against ~18 s with ours; the suite never runs under it.
            if key in ("ANSIBLE_STRATEGY", "ANSIBLE_STRATEGY_PLUGINS") and "mitogen" in value:
                raise ValueError(
                    f"env: {key}={value!r}: Mitogen is not supported (its SSH keepalive "
                    "replaces ours, and a node lost mid-task is noticed after minutes)"
                )
        return self
