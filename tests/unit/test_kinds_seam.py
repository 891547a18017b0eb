"""A cluster kind is one module (fleetmedic/kinds/): no module outside kinds/ and the
adapters names a concrete cluster class or branches on a kind, and the kinds are found by
the config's `kind:` and the agent's settings. (pyproject's import-linter contract "Only
kinds/ picks a cluster" forbids the imports; this catches a class named in code or docs.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleetmedic import kinds
from fleetmedic.agent.config import AgentConfig, SlurmAgentConfig
from fleetmedic.errors import ConfigError
from fleetmedic.model.config import parse

PACKAGE = Path(kinds.__file__).resolve().parents[1]
CONCRETE = re.compile(
    r"\b(Kube|KubernetesCluster|SlurmCluster|SlurmctldCluster|SlurmNodeDocs|FileStore)\b"
)
KIND_BRANCH = re.compile(
    r"""(\.kind\s*[!=]=)|isinstance\([^)]*(Kube|Slurm)|\b(if|elif)\b[^#]*\bslurm|"""
    r"""fleetmedic\.kinds\.\w|from fleetmedic\.kinds import \w"""
)
NAMES_NO_KIND = (
    "controller/execute.py",
    "controller/daemon.py",
    "controller/loop.py",
    "agent/cli.py",
    "agent/lokicli.py",
    "agent/writer.py",
)


def outside_the_kinds() -> list[Path]:
    return [
        p
        for p in PACKAGE.rglob("*.py")
        if p.relative_to(PACKAGE).parts[0] not in ("kinds", "adapters")
    ]


def test_no_module_outside_kinds_and_adapters_names_a_concrete_cluster_class():
    found = [
        f"{p.relative_to(PACKAGE)}:{n}: {line.strip()}"
        for p in outside_the_kinds()
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if CONCRETE.search(line)
    ]
    assert len(outside_the_kinds()) > 100  # (the walk found the package)
    assert found == []


def test_execute_daemon_loop_and_the_agent_clis_do_not_branch_on_a_kind():
    found = [
        f"{name}:{n}: {line.strip()}"
        for name in NAMES_NO_KIND
        for n, line in enumerate((PACKAGE / name).read_text().splitlines(), 1)
        if KIND_BRANCH.search(line)
    ]
    assert found == []


def test_the_config_and_the_agents_settings_pick_the_kind():
    assert kinds.for_config(parse({})).name == "kubernetes"
    assert kinds.for_config(parse({"kind": "slurm"})).name == "slurm"
    assert kinds.for_node_side(AgentConfig()).name == "kubernetes"
    assert kinds.for_node_side(AgentConfig(slurm=SlurmAgentConfig())).name == "slurm"
    with pytest.raises(ConfigError, match="no API server"):
        kinds.connect(parse({"kind": "slurm"}), kubeconfig="/etc/kubeconfig")


def test_every_kind_answers_the_whole_protocol():
    for kind in kinds.KINDS.values():
        for verb in ("connect", "node_docs", "preflight", "prepare", "claims", "answers"):
            assert callable(getattr(kind, verb)), (kind.name, verb)
