import json

import pytest

from fleetmedic.checks import network
from fleetmedic.checks.config import CheckConfig, NetworkConfig


@pytest.mark.parametrize(
    "peer,want",
    [
        ("10.0.0.5", ("10.0.0.5", 5201)),
        ("10.0.0.5:5301", ("10.0.0.5", 5301)),
        ("bastion.example.test:7000", ("bastion.example.test", 7000)),
        ("[fd00::5]:5202", ("fd00::5", 5202)),
        ("[fd00::5]", ("fd00::5", 5201)),
        ("fd00::5", ("fd00::5", 5201)),
    ],
)
def test_split_peer(peer, want):
    assert network.split_peer(peer, 5201) == want


def test_parse_iperf3_uses_what_the_receiver_got():
    doc = {
        "start": {},
        "intervals": [],
        "end": {"sum_sent": {"bits_per_second": 9.9e9}, "sum_received": {"bits_per_second": 2.5e9}},
    }
    assert network.parse_iperf3(json.dumps(doc)) == (2500.0, "")


@pytest.mark.parametrize(
    "text,fragment",
    [
        (
            json.dumps(
                {
                    "start": {},
                    "intervals": [],
                    "end": {},
                    "error": "unable to connect to server: Connection refused",
                }
            ),
            "Connection refused",
        ),
        (json.dumps({"error": "the server is busy running a test. try again later"}), "busy"),
        (json.dumps({"end": {}}), "no receiver summary"),
        ("not json", ""),
    ],
)
def test_parse_iperf3_errors(text, fragment):
    mbps, why = network.parse_iperf3(text)
    assert mbps is None and fragment in why


def test_no_peers_means_no_network_check():
    assert network.run(CheckConfig()) == []


def test_budget_always_fits_one_measurement():
    cfg = CheckConfig(timeout=2, network=NetworkConfig(peers=("x",), duration=10))
    assert network.budget(cfg) >= 10 + network.CONNECT_TIMEOUT
