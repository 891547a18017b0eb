import pytest

from fleetmedic.checks.config import CheckConfig
from fleetmedic.errors import ConfigError


def test_from_mapping_builds_sections():
    cfg = CheckConfig.from_mapping(
        {
            "vendor": "amd",
            "expected_gpus": 8,
            "network": {"peers": ["10.0.0.1:5201"], "min_mbps": 5000},
            "amd": {"bad_pages_limit": 10},
        }
    )
    assert cfg.vendor == "amd" and cfg.expected_gpus == 8
    assert cfg.network.peers == ("10.0.0.1:5201",) and cfg.network.min_mbps == 5000
    assert cfg.amd.bad_pages_limit == 10
    assert cfg.nvidia.require_persistence_mode is True


@pytest.mark.parametrize(
    "data,fragment",
    [
        ({"vendor": "intel"}, "vendor"),
        ({"timeout": 0}, "timeout"),
        ({"expected_gpus": -1}, "expected_gpus"),
        ({"network": {"peer": "x"}}, "peer"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_bad_config_is_one_line_config_error(data, fragment):
    with pytest.raises(ConfigError) as err:
        CheckConfig.from_mapping(data)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_hardware_and_fabric_sections():
    cfg = CheckConfig.from_mapping(
        {
            "hardware": {"label": "example.com/model", "pool": "a100", "profiles": "/x.yaml"},
            "fabric": {"sysfs_root": "/tmp/sys", "thresholds": {"rx_drops": 10}, "ignore": ["a"]},
        }
    )
    assert cfg.hardware.label == "example.com/model" and cfg.hardware.pool == "a100"
    assert cfg.hardware.profile is None and cfg.hardware.enabled
    assert cfg.fabric.sysfs_root == "/tmp/sys" and cfg.fabric.ignore == ("a",)
    # merged over the defaults: naming one counter keeps the others
    assert cfg.fabric.thresholds["rx_drops"] == 10 and cfg.fabric.thresholds["link_downed"] == 0
    assert CheckConfig().hardware.label == "node.kubernetes.io/instance-type"


@pytest.mark.parametrize(
    "data,fragment",
    [
        ({"fabric": {"thresholds": {"link_downed": -1}}}, "fabric.thresholds.link_downed"),
        ({"fabric": {"thresholds": [1]}}, "fabric.thresholds"),
        ({"hardware": {"instance_type": "p5"}}, "instance_type"),
    ],
)
def test_bad_hardware_or_fabric_config(data, fragment):
    with pytest.raises(ConfigError) as err:
        CheckConfig.from_mapping(data)
    assert fragment in str(err.value) and "\n" not in str(err.value)
