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
