"""model/gpuvendor.py: a Slurm node's GPU vendor from the agent's record, the GPU GRES type
or the node's features, in that order (the reinstall phase picks the driver or ROCm by
it). The document that carries it is read from slurmctld in
tests/integration/test_slurm_cluster.py and used end to end in
tests/integration/test_slurm_controller_e2e.py."""

from __future__ import annotations

import pytest

from fleetmedic.model.gpuvendor import gres_types, of_words, vendor


@pytest.mark.parametrize(
    "gres, want",
    [
        ("gpu:h100:8(S:0-1)", "nvidia"),
        ("gpu:a100:4,nic:mlx5:2", "nvidia"),
        ("gpu:nvidia_h100_80gb_hbm3:8(S:0,1)", "nvidia"),  # slurmd's AutoDetect=nvml name
        ("gpu:tesla_v100-sxm2-16gb:8", "nvidia"),
        ("gpu:gh200:1", "nvidia"),
        ("gpu:mi300x:8", "amd"),
        ("gpu:mi250x:8(S:0-3)", "amd"),
        ("gpu:amd_instinct_mi210:4", "amd"),
        ("gpu:8", "unknown"),  # no type: the features are asked next
        ("gpu:fast:8", "unknown"),
        ("", "unknown"),
    ],
)
def test_the_gres_type_names_the_vendor(gres, want):
    assert vendor(None, gres, "") == want


@pytest.mark.parametrize(
    "features, want",
    [
        ("nvidia,ib", "nvidia"),
        ("h100,hdr", "nvidia"),
        ("amd,rocm6", "amd"),
        ("mi250x", "amd"),
        ("rack-b12,x86_64", "unknown"),  # a rack name is not a GPU
        ("nvidia,amd", "unknown"),  # both: says nothing
        ("", "unknown"),
    ],
)
def test_features_name_the_vendor_when_the_gres_does_not(features, want):
    assert vendor(None, "gpu:8", features) == want


def test_the_agents_record_comes_first_then_the_gres_then_the_features():
    assert vendor("amd", "gpu:h100:8", "nvidia") == "amd"
    assert vendor(None, "gpu:h100:8", "amd") == "nvidia"
    assert vendor("unknown", "gpu:8", "amd") == "amd"  # only nvidia|amd count as a record


def test_gres_types_keep_only_typed_gpus():
    assert gres_types("gpu:h100:8(S:0,1),gpu:a100:2,nic:1,gpu:4") == ["h100", "a100"]
    assert of_words(["h100", "nvidia"]) == "nvidia" and of_words(["b12"]) is None
