"""`kind: slurm` in the controller config (model/config/slurm.py): what it takes, what it
refuses in one line, and how `clusters:` mixes Kubernetes and Slurm."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetmedic.errors import ConfigError
from fleetmedic.model.config import parse


def test_a_slurm_cluster_with_defaults_and_with_settings():
    cfg = parse({"kind": "slurm"}, "t", None)
    s = cfg.slurm_settings()
    assert (s.conf, s.partitions, s.reason_prefix) == (None, (), "fleetmedic:")
    assert s.poll_interval == 30 and s.state_dir == Path("/var/lib/fleetmedic/slurm")
    cfg = parse(
        {
            "kind": "slurm",
            "slurm": {"partitions": ["gpu", "a100"], "poll_interval": "1m", "reason_prefix": "fm:"},
            "ladder": {"reboot_via": "slurm"},
        },
        "t",
        None,
    )
    assert cfg.slurm_settings().partitions == ("gpu", "a100")
    assert cfg.slurm_settings().poll_interval == 60
    assert cfg.ladder.reboot_via == "slurm"


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"slurm": {}}, "slurm: set, but kind is kubernetes (add `kind: slurm`)"),
        ({"ladder": {"reboot_via": "slurm"}}, "ladder.reboot_via: slurm needs `kind: slurm`"),
        ({"kind": "slurm", "sweep": {}}, "sweep is not supported on Slurm (sweeps need pods)"),
        (
            {"kind": "slurm", "domains": [{"key": "rack"}]},
            "domains is not supported on Slurm",
        ),
        (
            {"kind": "slurm", "ladder": {"order": ["reboot", "replace", "manual"]}},
            "replace is not supported on Slurm",
        ),
        ({"kind": "slurm", "slurm": {"poll_interval": 0}}, "poll_interval"),
        ({"kind": "slurm", "slurm": {"partitions": ["a,b"]}}, "single words"),
        ({"kind": "slurm", "slurm": {"reason_prefix": " fm:"}}, "bad Slurm reason prefix"),
        ({"kind": "pbs"}, "kind"),
        ({"clusters": [{"name": "a"}]}, "needs `kube:` (or `kind: slurm`)"),
    ],
)
def test_what_a_slurm_config_refuses_in_one_line(data, said):
    with pytest.raises(ConfigError) as exc:
        parse(data, "t", None)
    assert said in str(exc.value) and "\n" not in str(exc.value)


def test_mixed_clusters_each_slurm_one_with_its_own_state_dir():
    cfg = parse(
        {
            "slurm": {"state_dir": "/srv/fm"},
            "clusters": [
                {"name": "k8s", "kube": {"context": "gpu"}},
                {"name": "hpc", "kind": "slurm", "slurm": {"partitions": ["gpu"]}},
                {"name": "own", "kind": "slurm", "slurm": {"state_dir": "/data/own"}},
            ],
        },
        "t",
        None,
    )
    assert cfg.cluster("k8s").kind == "kubernetes"
    hpc = cfg.cluster("hpc")
    assert hpc.kind == "slurm" and hpc.slurm_settings().partitions == ("gpu",)
    assert hpc.slurm_settings().state_dir == Path("/srv/fm/hpc")
    assert cfg.cluster("own").slurm_settings().state_dir == Path("/data/own")
