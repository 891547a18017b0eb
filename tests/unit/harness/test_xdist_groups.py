"""tests/conftest.py's units of work under pytest-xdist (--dist loadscope): the files that
share a heavy session fixture are one unit, any other file is its own; and a file that uses
a heavy fixture outside its group stops the run."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import conftest


@pytest.mark.parametrize(
    ("nodeid", "scope"),
    [
        ("tests/integration/test_kubelet_node.py::test_a", "group kubelet"),
        ("tests/integration/test_agent_daemonset.py::test_b[x-y]", "group kubelet"),
        ("tests/integration/test_loki_source.py::test_c", "group loki"),
        ("tests/integration/test_receptor_executor.py::test_d[patched]", "group receptor"),
        ("tests/integration/test_sweeps_e2e.py::test_e", "tests/integration/test_sweeps_e2e.py"),
        ("tests/unit/policy/test_ladder.py::test_f[1]", "tests/unit/policy/test_ladder.py"),
        ("tests/unit/agent/test_x.py::TestY::test_z", "tests/unit/agent/test_x.py"),
        # a Slurm file's releases apart, whatever else the test's id carries
        (
            "tests/integration/test_slurm_steps.py::test_g[slurm-24.11]",
            "tests/integration/test_slurm_steps.py [slurm-24.11]",
        ),
        (
            "tests/integration/test_slurm_steps.py::test_h[slurm-22.05-2-slurm]",
            "tests/integration/test_slurm_steps.py [slurm-22.05]",
        ),
        ("tests/integration/test_a.py::test_i[myslurm-1.2]", "tests/integration/test_a.py"),
    ],
)
def test_scopes(nodeid, scope):
    assert conftest.xdist_scope(nodeid) == scope


def item(nodeid: str, *fixtures: str) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, fixturenames=list(fixtures))


def test_a_heavy_fixture_outside_its_group_is_named():
    items = [
        item("tests/integration/test_kubelet_node.py::t", "kubelet_fleet", "kube"),
        item("tests/integration/test_new.py::t", "fleet", "loki"),
        item("tests/integration/test_mesh_smoke.py::t", "mesh_binaries"),
    ]
    assert conftest.misgrouped(items) == [
        "tests/integration/test_new.py uses loki: put it in group 'loki'"
    ]


def test_the_heavy_fixtures_and_files_exist():
    """A renamed fixture or file would silently leave its group."""
    from tests.harness import kubelet_fixtures, loki_fixtures, mesh_fixtures

    defined = set(vars(kubelet_fixtures)) | set(vars(loki_fixtures)) | set(vars(mesh_fixtures))
    assert set(conftest.GROUP_BY_FIXTURE) <= defined
    root = Path(__file__).resolve().parents[3]
    assert all((root / path).exists() for path in conftest.WORKER_GROUPS)
