"""Which Slurm releases a Slurm test runs on (tests/harness/slurm_fixtures.py): all by
default and in CI, a desk run's choice with FLEETMEDIC_SLURM_RELEASES, never an unknown
one; a test's ``slurm_releases`` marker keeps it to some, and must say why; a
contract-only release (26.05) runs the tests marked ``slurm_contract`` alone."""

from __future__ import annotations

import re

import pytest

from tests.harness import slurm24
from tests.harness.fleet import ROOT
from tests.harness.slurm_fixtures import releases

pytest_plugins = ["pytester"]


def test_every_release_by_default(monkeypatch):
    monkeypatch.delenv("FLEETMEDIC_SLURM_RELEASES", raising=False)
    assert releases() == slurm24.VERSIONS == ("22.05", "24.11", "26.05")


def test_the_releases_come_from_the_one_table():
    """scripts/slurm-releases.toml: the host's 22.05, the trees' 24.11 and 26.05, and
    26.05 the only contract-only one."""
    assert [(r.version, r.suite, r.debian, r.contract_only) for r in slurm24.RELEASES] == [
        ("22.05", "", 12, False),
        ("24.11", "trixie", 13, False),
        ("26.05", "forky", 14, True),
    ]


def test_a_desk_run_names_some(monkeypatch):
    monkeypatch.setenv("FLEETMEDIC_SLURM_RELEASES", " 24.11 ")
    assert releases() == ("24.11",)
    monkeypatch.setenv("FLEETMEDIC_SLURM_RELEASES", "24.11,22.05")
    assert releases() == ("24.11", "22.05")
    monkeypatch.setenv("FLEETMEDIC_SLURM_RELEASES", "26.05")
    assert releases() == ("26.05",)


@pytest.mark.parametrize("wanted", ["23.02", "22.05,25.11", ",", "slurm-24.11", "26.5"])
def test_an_unknown_release_is_a_usage_error(monkeypatch, wanted):
    monkeypatch.setenv("FLEETMEDIC_SLURM_RELEASES", wanted)
    with pytest.raises(
        pytest.UsageError, match=re.escape("the test clusters run 22.05, 24.11, 26.05")
    ):
        releases()


CONFTEST = """
from tests.harness.slurm_fixtures import pytest_generate_tests  # noqa: F401
import re

import pytest

@pytest.fixture(scope="session")
def slurm_version(request):
    return request.param
"""


def test_the_marker_keeps_a_test_to_its_releases_and_needs_a_reason(pytester, monkeypatch):
    monkeypatch.delenv("FLEETMEDIC_SLURM_RELEASES", raising=False)
    monkeypatch.syspath_prepend(str(ROOT))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        """
        import pytest

        def test_everywhere(slurm_version):
            pass

        @pytest.mark.slurm_releases("22.05", reason="a known gap on 24.11")
        def test_kept(slurm_version):
            pass
        """
    )
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider")
    ids = sorted(line.split("::", 1)[1] for line in result.outlines if "::" in line)
    assert ids == [
        "test_everywhere[slurm-22.05]",
        "test_everywhere[slurm-24.11]",
        "test_kept[slurm-22.05]",
    ], result.outlines
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.slurm_releases("22.05")
        def test_no_reason(slurm_version):
            pass
        """
    )
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider")
    assert result.ret != 0
    assert "slurm_releases needs a reason" in "\n".join(result.outlines + result.errlines)


CONTRACT_TESTS = """
import pytest

def test_not_contract(slurm_version):
    pass

@pytest.mark.slurm_contract
def test_contract(slurm_version):
    pass

@pytest.mark.slurm_contract
@pytest.mark.slurm_releases("22.05", "26.05", reason="a known gap on 24.11")
def test_contract_kept(slurm_version):
    pass

class TestMarkedClass:
    pytestmark = [pytest.mark.slurm_contract]

    def test_in_class(self, slurm_version):
        pass
"""


def _collected(pytester) -> list[str]:
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider")
    assert result.ret == 0, result.outlines + result.errlines
    return sorted(line.split("::", 1)[1] for line in result.outlines if "::" in line)


def test_a_contract_only_release_runs_the_contract_tests_alone(pytester, monkeypatch):
    """26.05 is flagged contract_only: an unmarked Slurm test runs on 22.05 and 24.11 only;
    one marked slurm_contract (itself, its class or its module) on all three, within its
    slurm_releases."""
    monkeypatch.delenv("FLEETMEDIC_SLURM_RELEASES", raising=False)
    monkeypatch.syspath_prepend(str(ROOT))
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nmarkers =\n    slurm_contract: x\n    slurm_releases: x\n")
    pytester.makepyfile(test_contract=CONTRACT_TESTS)
    pytester.makepyfile(
        test_module_marked="""
        import pytest

        pytestmark = pytest.mark.slurm_contract

        def test_in_module(slurm_version):
            pass
        """
    )
    assert _collected(pytester) == [
        "TestMarkedClass::test_in_class[slurm-22.05]",
        "TestMarkedClass::test_in_class[slurm-24.11]",
        "TestMarkedClass::test_in_class[slurm-26.05]",
        "test_contract[slurm-22.05]",
        "test_contract[slurm-24.11]",
        "test_contract[slurm-26.05]",
        "test_contract_kept[slurm-22.05]",
        "test_contract_kept[slurm-26.05]",
        "test_in_module[slurm-22.05]",
        "test_in_module[slurm-24.11]",
        "test_in_module[slurm-26.05]",
        "test_not_contract[slurm-22.05]",
        "test_not_contract[slurm-24.11]",
    ]


def test_a_desk_run_of_the_contract_only_release_runs_its_contract_tests(pytester, monkeypatch):
    """FLEETMEDIC_SLURM_RELEASES=26.05: the contract tests on 26.05; every other Slurm test
    has no release left and is skipped (pytest's empty parameter set), not run on another."""
    monkeypatch.setenv("FLEETMEDIC_SLURM_RELEASES", "26.05")
    monkeypatch.syspath_prepend(str(ROOT))
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nmarkers =\n    slurm_contract: x\n    slurm_releases: x\n")
    pytester.makepyfile(test_contract=CONTRACT_TESTS)
    ids = _collected(pytester)
    assert [i for i in ids if "[" in i and "slurm-" in i] == [
        "TestMarkedClass::test_in_class[slurm-26.05]",
        "test_contract[slurm-26.05]",
        "test_contract_kept[slurm-26.05]",
    ]
    result = pytester.runpytest("-q", "-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=3, skipped=1)
