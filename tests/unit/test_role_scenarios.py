"""Every role has a Molecule scenario of its own (tests/molecule/<role>), which scripts/test.sh
runs in CI: a new role without one fails here. Each scenario converges its role on the
shared driver (the delegated driver with the test fleet of tests/molecule/_shared) and
checks idempotence, as the others do."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p.parent.parent.name for p in (ROOT / "roles").glob("*/tasks/main.yml"))
MOLECULE = ROOT / "tests" / "molecule"
# shared playbooks, and Molecule's empty default (see its molecule.yml)
NOT_SCENARIOS = {"_shared", "default"}
SCENARIOS = sorted(
    p.parent.name for p in MOLECULE.glob("*/molecule.yml") if p.parent.name not in NOT_SCENARIOS
)


def test_every_role_has_a_scenario_and_every_scenario_a_role():
    assert len(ROLES) >= 12  # the glob found the roles (12 when this test was written)
    missing = sorted(set(ROLES) - set(SCENARIOS))
    assert not missing, f"roles without a Molecule scenario (add tests/molecule/<role>/): {missing}"
    orphans = sorted(set(SCENARIOS) - set(ROLES))
    assert not orphans, f"scenarios named after no role: {orphans}"


def playbook_path(scenario: Path, step: str) -> Path:
    playbooks = yaml.safe_load((scenario / "molecule.yml").read_text())["provisioner"]["playbooks"]
    return (scenario / playbooks[step]).resolve()


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_scenario_runs_its_role_on_the_shared_driver_twice(name):
    scenario = MOLECULE / name
    config = yaml.safe_load((scenario / "molecule.yml").read_text())
    assert config["driver"] == {"name": "default", "options": {"managed": False}}
    assert config["prerun"] is False  # a prerun would install a stale copy of the collection
    links = config["provisioner"]["inventory"]["links"]
    assert (scenario / links["hosts"]).resolve() == MOLECULE / "_shared" / "fleet_inventory.py"
    for step in ("create", "destroy"):
        assert playbook_path(scenario, step) == MOLECULE / "_shared" / f"{step}.yml", step
    sequence = config["scenario"]["test_sequence"]
    assert sequence.index("converge") < sequence.index("idempotence") < sequence.index("verify")
    assert sequence[0] == sequence[-1] == "destroy"
    converge = yaml.safe_load(playbook_path(scenario, "converge").read_text())
    roles = [
        r["role"] if isinstance(r, dict) else r for play in converge for r in play.get("roles", [])
    ]
    assert f"fleetmedic.fleet.{name}" in roles, f"{name}/converge.yml does not apply roles/{name}"
    verify = playbook_path(scenario, "verify").read_text()
    assert "ansible.builtin.assert" in verify, f"{name}/verify.yml asserts nothing"
