"""The catalog is data with a source for every entry, and follows the issue's rules."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import pytest
import yaml

from fleetmedic.errors import ConfigError
from fleetmedic.scan import catalog
from fleetmedic.scan.finding import ACTIONS

CAT = catalog.load()


def test_every_xid_from_1_to_172_is_listed_once():
    assert sorted(CAT.xids) == list(range(1, 173))


@pytest.mark.parametrize("code", sorted(CAT.xids))
def test_xid_action_follows_its_bucket_or_says_why(code):
    entry = CAT.xids[code]
    assert entry.sources and all(s in CAT.sources for s in entry.sources)
    assert entry.action in ACTIONS
    default = CAT.bucket_actions.get(entry.immediate) if entry.immediate else None
    assert entry.action == default or entry.why, (
        f"Xid {code} deviates from its bucket without a `why`"
    )


def test_issue_rules():
    assert CAT.xids[64].action == "manual"  # row-remapping failure
    assert CAT.xids[54].action == "manual"  # auxiliary power
    assert CAT.xids[79].action == "reboot"  # fallen off the bus
    for code in (13, 31, 43, 45, 63, 94):  # application errors
        assert CAT.xids[code].action in ("none", "monitor"), code
    assert CAT.bucket_actions["RESET_GPU"] == "reboot"
    for code, entry in CAT.xids.items():
        if entry.immediate == "RESET_GPU" and code != 64:
            assert entry.action == "reboot", code


def test_buckets_named_by_the_issue_are_mapped():
    for bucket in (
        "RESTART_APP",
        "RESET_GPU",
        "RESTART_BM",
        "WORKFLOW_XID_48",
        "WORKFLOW_NVLINK_ERR",
        "IGNORE",
        "CONTACT_SUPPORT",
        "XID_154",
        "WORKFLOW_NVLINK5_ERR",
    ):
        assert CAT.bucket_actions[bucket] in ACTIONS


def test_xid154_recovery_actions_by_hex_value():
    assert {k: v[1] for k, v in CAT.xid154_actions.items()} == {
        0x0: "none",
        0x1: "reboot",
        0x2: "reboot",
        0x3: "reboot",
        0x4: "reboot",
    }
    assert CAT.xid154_unknown_action == "manual"


def test_sxid_severities():
    severities = {e.severity for e in CAT.sxids.values()}
    assert severities == {"non_fatal", "fatal", "always_fatal"}
    for entry in CAT.sxids.values():
        assert entry.sources
        if entry.severity in ("fatal", "always_fatal"):
            assert entry.action == "reboot", entry.code
    assert CAT.sxids[22013].action == "none"
    assert CAT.sxids[12020].severity == "always_fatal"


def test_rules_have_sources_and_triggers():
    assert {rule.kind for rule in CAT.rules} == {"nvrm", "amdgpu", "nccl", "cuda"}
    for rule in CAT.rules:
        assert rule.sources
        assert any(t in rule.requires for t in CAT.triggers)
    ids = [rule.id for rule in CAT.rules]
    assert len(ids) == len(set(ids))


def test_amdgpu_covers_the_issue_list():
    ids = {rule.id for rule in CAT.rules}
    for wanted in (
        "amdgpu.gpu-reset",
        "amdgpu.ring-timeout",
        "amdgpu.ras-uncorrectable",
        "amdgpu.ras-correctable",
        "amdgpu.page-fault",
        "amdgpu.init-failed",
    ):
        assert wanted in ids


def _copy_catalog(tmp_path: Path) -> Path:
    for name in catalog.FILES:
        shutil.copy(resources.files("fleetmedic.data").joinpath(name), tmp_path / name)
    return tmp_path


@pytest.mark.parametrize(
    "breakage",
    [
        ("xid_catalog.yaml", lambda d: d["xids"][0].pop("source")),
        ("xid_catalog.yaml", lambda d: d["xids"][0].update(source="no-such-source")),
        ("xid_catalog.yaml", lambda d: d["xids"][0].update(action="reset_gpu")),
        ("amdgpu_catalog.yaml", lambda d: d["rules"][0].update(match="(unclosed")),
        ("sxid_catalog.yaml", lambda d: d["sxids"][0].update(severity="maybe")),
    ],
)
def test_a_broken_catalog_is_a_one_line_config_error(tmp_path, breakage):
    name, breaker = breakage
    directory = _copy_catalog(tmp_path)
    data = yaml.safe_load((directory / name).read_text())
    breaker(data)
    (directory / name).write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        catalog.load(str(directory))
    assert "\n" not in str(err.value)


def test_an_unreadable_catalog_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError):
        catalog.load(str(tmp_path))
