"""The tail's message format (Loki's HTTP API: ``streams`` and ``dropped_entries``) and
its mode's config; the tail itself runs against the real Loki in
tests/integration/test_loki_tail.py."""

from __future__ import annotations

import pytest

from fleetmedic.adapters.loki import Entry, _close_reason, parse_tail
from fleetmedic.agent.lokisource import LokiSourceConfig
from fleetmedic.errors import ConfigError


def test_a_tail_message_becomes_entries_oldest_first_with_the_dropped_count():
    msg = {
        "streams": [
            {"stream": {"node_name": "a"}, "values": [["30", "late"], ["10", "early"]]},
            {"stream": {"node_name": "b"}, "values": [["20", "mid", {"detected_level": "x"}]]},
        ],
        "dropped_entries": [{"labels": {"node_name": "a"}, "timestamp": "5"}],
    }
    got = parse_tail(msg)
    assert got.entries == [
        Entry({"node_name": "a"}, 10, "early"),
        Entry({"node_name": "b", "detected_level": "x"}, 20, "mid"),
        Entry({"node_name": "a"}, 30, "late"),
    ]
    assert got.dropped == 1
    assert parse_tail({"streams": None}).entries == [] and parse_tail({}).dropped == 0


def test_a_close_frame_says_its_code_and_reason_on_one_line():
    assert _close_reason(b"\x03\xf3max concurrent tail\nrequests") == (
        "1011 max concurrent tail requests"
    )
    assert _close_reason(b"") == "no reason given"


def test_the_mode_is_tail_or_poll():
    assert LokiSourceConfig("http://loki:3100").mode == "tail"
    assert LokiSourceConfig("http://loki:3100", mode="poll").mode == "poll"
    with pytest.raises(ConfigError, match="sideways"):
        LokiSourceConfig("http://loki:3100", mode="sideways")
