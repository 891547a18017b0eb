"""Which Slurm releases a Slurm test runs on (tests/harness/slurm_fixtures.py): all by
default and in CI, a desk run's choice with FLEETMEDIC_SLURM_RELEASES, never an unknown
one; a test's ``slurm_releases`` marker keeps it to some, and must say why."""

from __future__ import annotations

import re

import pytest

from tests.harness import slurm24
from tests.harness.fleet import ROOT
from tests.harness.slurm_fixtures import releases

pytest_plugins = ["pytester"]


def test_every_release_by_default(monkeypatch):
    monkeypatch.delenv("FLEETMEDIC_SLURM_RELEASES", raising=False)
    assert releases() == slurm24.VERSIONS == ("22.05", "24.11")


def test_a_desk_run_names_some(monkeypatch):
    monkeypatch.setenv("FLEETMEDIC_SLURM_RELEASES", " 24.11 ")
    assert releases() == ("24.11",)
    monkeypatch.setenv("FLEETMEDIC_SLURM_RELEASES", "24.11,22.05")
    assert releases() == ("24.11", "22.05")


@pytest.mark.parametrize("wanted", ["23.02", "22.05,25.11", ",", "slurm-24.11"])
def test_an_unknown_release_is_a_usage_error(monkeypatch, wanted):
    monkeypatch.setenv("FLEETMEDIC_SLURM_RELEASES", wanted)
    with pytest.raises(pytest.UsageError, match=re.escape("the test clusters run 22.05, 24.11")):
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
