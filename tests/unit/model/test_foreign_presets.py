"""Foreign-signal presets (data/foreign_presets.yaml) and the kinds NVSentinel needs: a
label with values and a fingerprint, a condition named by a glob and its reason; and the
``nvsentinel:`` config section."""

from __future__ import annotations

import pytest

from fleetmedic.errors import ConfigError
from fleetmedic.model.config import DEFAULT_FOREIGN, parse
from fleetmedic.model.config.sections import foreign_presets
from fleetmedic.model.nodestate import view
from fleetmedic.model.vocabulary import preset

STATE = "dgxc.nvidia.com/nvsentinel-state"
STAMP = "k8saas.nvidia.com/cordon-timestamp"


def node(labels=None, conditions=None) -> dict:
    return {
        "metadata": {"name": "n1", "labels": dict(labels or {}), "annotations": {}},
        "spec": {},
        "status": {"conditions": list(conditions or [])},
    }


def seen(cfg, n):
    return view(n, preset(), cfg.foreign()).foreign


def test_the_default_is_the_three_presets_it_always_was():
    assert (
        *foreign_presets()["konduktor"],
        *foreign_presets()["aws-gpu-healthcheck"],
        *foreign_presets()["npd"],
    ) == DEFAULT_FOREIGN
    assert [f.tool for f in parse({}).foreign_signals] == [
        "konduktor",
        "aws-gpu-healthcheck",
        "npd",
    ]


def test_presets_and_mappings_mix():
    cfg = parse(
        {
            "foreign_signals": [
                "nvsentinel",
                {"kind": "taint", "key": "example.com/bad", "tool": "x"},
            ]
        }
    )
    assert [f.tool for f in cfg.foreign_signals] == ["nvsentinel", "nvsentinel", "x"]


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"foreign_signals": ["nvsentinal"]}, "unknown foreign-signal preset 'nvsentinal'"),
        ({"foreign_signals": [{"kind": "condition", "key": "*"}]}, "add `reason`"),
        ({"foreign_signals": [{"kind": "label", "key": "x", "value": "y"}]}, "takes `values`"),
        (
            {"foreign_signals": [{"kind": "label", "key": "x", "after_repair": "clear"}]},
            "a label belongs to the tool",
        ),
        (
            {"foreign_signals": [{"kind": "taint", "key": "x", "values": ["a"]}]},
            "for `kind: label`",
        ),
        ({"nvsentinel": {"enabled": "perhaps"}}, "nvsentinel.enabled"),
        ({"nvsentinel": {"custom_actions": {"x": "fix-it"}}}, "nvsentinel.custom_actions.x"),
        ({"nvsentinel": {"release_taint": "not a key"}}, "valid taint key"),
        (
            {"kind": "slurm", "nvsentinel": {"enabled": True}},
            "nvsentinel is not supported on Slurm",
        ),
    ],
)
def test_bad_config_is_one_line(data, said):
    with pytest.raises(ConfigError) as exc:
        parse(data)
    assert said in str(exc.value) and "\n" not in str(exc.value)


def test_nvsentinel_state_label_is_a_signal_only_where_its_pipeline_ends():
    cfg = parse({"foreign_signals": ["nvsentinel"]})
    assert not seen(cfg, node({STATE: "quarantined"}))
    assert not seen(cfg, node({STATE: "remediating"}))
    [s] = seen(cfg, node({STATE: "drain-succeeded", STAMP: "2026-11-28T10-00-00Z"}))
    assert (s.tool, s.enters, s.after_repair) == ("nvsentinel", "reboot", "wait-for-change")
    # a new quarantine (a new cordon timestamp) is a new signal, the same one is not
    [again] = seen(cfg, node({STATE: "drain-succeeded", STAMP: "2026-11-28T10-00-00Z"}))
    [later] = seen(cfg, node({STATE: "drain-succeeded", STAMP: "2026-11-28T11-30-00Z"}))
    assert again.fingerprint == s.fingerprint != later.fingerprint


def test_nvsentinel_conditions_by_their_reason_and_not_the_kubelets():
    cfg = parse({"foreign_signals": ["nvsentinel"]})
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
    assert not seen(cfg, node(conditions=[ready]))
    healthy = {"type": "SysLogsXIDError", "status": "False", "reason": "SysLogsXIDErrorIsHealthy"}
    assert not seen(cfg, node(conditions=[ready, healthy]))
    bad = {
        "type": "SysLogsXIDError",
        "status": "True",
        "reason": "SysLogsXIDErrorIsNotHealthy",
        "message": "ErrorCode:79 PCI:0000:5a:00 GPU has fallen off the bus",
        "lastTransitionTime": "2026-11-28T10:00:00Z",
    }
    [s] = seen(cfg, node(conditions=[ready, bad]))
    assert (
        "fallen off the bus" in s.evidence and s.describe == "condition *=True reason *IsNotHealthy"
    )
    other = {**bad, "type": "GpuMemWatch", "reason": "GpuMemWatchIsNotHealthy"}
    [both] = seen(cfg, node(conditions=[bad, other]))
    assert both.fingerprint != s.fingerprint, "a second check turning bad is news"


def test_nvsentinel_section_defaults_are_its_released_names():
    n = parse({}).nvsentinel
    assert not n.enabled
    assert (n.api_group, n.version) == ("nvsentinel.dgxc.nvidia.com", "v1")
    assert n.release_taint == "nvsentinel.dgxc.nvidia.com/external-remediation"
    assert n.managed_label == "nvsentinel.dgxc.nvidia.com/managed"
