"""The catalog is data with a source for every entry, and follows the issue's rules."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import pytest
import yaml

from fleetmedic.errors import ConfigError
from fleetmedic.scan import catalog
from fleetmedic.scan.finding import ACTION_RANK, ACTIONS
from fleetmedic.scan.xidcontext import load_workflows

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
    assert CAT.bucket_actions["RESET_GPU"] == "reset"
    for code, entry in CAT.xids.items():
        if entry.immediate == "RESET_GPU" and code != 64:
            assert entry.action == "reset", code


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
        0x1: "reset",
        0x2: "reboot",
        0x3: "reset",
        0x4: "reset",
    }
    assert CAT.xid154_unknown_action == "manual"


def test_sxid_severities():
    severities = {e.severity for e in CAT.sxids.values()}
    assert severities == {"non_fatal", "fatal", "always_fatal"}
    # the Fabric Manager guide 2.3's bare-metal recovery: a fatal SXid resets the GPUs
    # (reboot only if it persists), an always-fatal one restarts the host
    rung = {"fatal": "reset", "always_fatal": "reboot"}
    for entry in CAT.sxids.values():
        assert entry.sources == ("nvidia-fm-guide-2-3",), entry.code
        if entry.severity in rung:
            assert entry.action == rung[entry.severity], entry.code
    assert CAT.sxids[22013].action == "none"
    assert CAT.sxids[12020].severity == "always_fatal"


def test_rules_have_sources_and_triggers():
    assert {rule.kind for rule in CAT.rules} == {"nvrm", "amdgpu", "nccl", "cuda", "fabricmanager"}
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
    for name in catalog.FILES + catalog.SOURCE_LISTS:
        shutil.copy(resources.files("fleetmedic.data").joinpath(name), tmp_path / name)
    return tmp_path


@pytest.mark.parametrize(
    "breakage",
    [
        ("xid_catalog.yaml", lambda d: d["xids"][0].pop("source")),
        ("xid_catalog.yaml", lambda d: d["xids"][0].update(source="no-such-source")),
        ("xid_catalog.yaml", lambda d: d["xids"][0].update(action="reset_gpu")),
        (
            "xid_catalog.yaml",
            lambda d: d.update(thresholds={"xid.9": {"count": 3, "action": "monitor"}}),
        ),
        (  # a shipped count needs its published source (issue 39 item 6)
            "xid_catalog.yaml",
            lambda d: d.update(thresholds={"xid.9": {"count": 3, "action": "reboot"}}),
        ),
        ("xid_catalog.yaml", lambda d: d["families"]["entries"][0].update(family="no-such")),
        ("xid_catalog.yaml", lambda d: d["families"]["entries"].pop()),  # a family left out
        ("amdgpu_catalog.yaml", lambda d: d["families"]["entries"][0].update(action="fix")),
        (  # an entry may raise the driver's word, never lower a fence
            "sxid_catalog.yaml",
            lambda d: next(e for e in d["sxids"] if e["severity"] == "fatal").update(
                action="monitor", why="x"
            ),
        ),
        ("xid_catalog.yaml", lambda d: d["joins"][0].update(head="(unclosed")),
        ("amdgpu_catalog.yaml", lambda d: d["rules"][-1].update(continued_by="(unclosed")),
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


# -- drift: NVIDIA's buckets, our actions and the classifier stay in step (issue 12 item 5)


def _catalog_actions() -> set[str]:
    """Every action some catalog entry, table or fallback can hand to the classifier."""
    found = {e.action for e in CAT.xids.values()}
    found |= set(CAT.bucket_actions.values()) | {CAT.unknown_xid_action}
    found |= {a for _name, a in CAT.xid154_actions.values()} | {CAT.xid154_unknown_action}
    found |= set(CAT.nvlink5_bucket_actions.values()) | set(CAT.nvlink5_severity_actions.values())
    found |= {e.action for e in CAT.sxids.values()} | set(CAT.sxid_severity_actions.values())
    found |= {CAT.unknown_sxid_action} | {rule.action for rule in CAT.rules}
    found |= {t.action for t in CAT.thresholds.values()}  # counted monitor findings
    found |= {a for w in load_workflows().values() for a in (w.action, w.otherwise)}  # Xid 13/31/45
    return found


def test_every_bucket_the_catalog_uses_maps_to_one_of_our_actions():
    used = {e.immediate for e in CAT.xids.values() if e.immediate}
    assert used <= set(CAT.bucket_actions), sorted(used - set(CAT.bucket_actions))
    for bucket, action in CAT.bucket_actions.items():
        assert action in ACTIONS, bucket
    rows = {b for row in CAT.nvlink5.values() for b in [*row.status.values(), row.default] if b}
    assert rows | {"RESET_GPU"} <= set(CAT.nvlink5_bucket_actions)
    for rule in CAT.rules:
        assert rule.bucket is None or rule.bucket in CAT.bucket_actions, rule.id
        if rule.bucket is not None:  # never weaker than the bucket (the boot path reboots)
            assert ACTION_RANK[rule.action] >= ACTION_RANK[CAT.bucket_actions[rule.bucket]], rule.id


def test_no_bucket_mapping_is_dead():
    used = {e.immediate for e in CAT.xids.values() if e.immediate}
    used |= {rule.bucket for rule in CAT.rules if rule.bucket}
    assert set(CAT.bucket_actions) <= used, sorted(set(CAT.bucket_actions) - used)


def test_every_xid_has_a_known_source():
    for code, entry in CAT.xids.items():
        assert entry.sources and all(s in CAT.sources for s in entry.sources), code


def test_every_action_is_reachable_from_the_catalog_and_nothing_else_is():
    # `diagnose` (issue 27) is reached through the context workflows (WORKFLOW_XID_13/31)
    assert _catalog_actions() == set(ACTIONS)


def test_every_fencing_action_has_a_ladder_state():
    from fleetmedic.model.actions import FENCE_AT, FENCING_ACTIONS
    from fleetmedic.model.vocabulary import REPAIR_STATES

    assert set(FENCING_ACTIONS) == set(FENCE_AT)
    assert set(FENCE_AT.values()) <= set(REPAIR_STATES)
    assert set(ACTIONS) - set(FENCING_ACTIONS) == {"none", "monitor"}


def test_thresholds_name_rules_that_exist_and_only_monitor():
    rule_ids = {rule.id for rule in CAT.rules} | {f"xid.{c}" for c in CAT.xids}
    rule_ids |= {f"sxid.{c}" for c in CAT.sxids} | {"sxid.unknown"}
    rule_ids |= {rule.id for rule in CAT.net}  # the safety net's <driver>.unclassified
    for key, threshold in CAT.thresholds.items():
        matches = [r for r in rule_ids if CAT.threshold_for(r) is threshold]
        assert matches, f"threshold {key} matches no rule"
        assert threshold.count > 0 and threshold.action in ACTIONS
