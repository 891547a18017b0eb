"""The Loki source's cursor and query filter (pure parts of agent/lokisource.py); the source
itself runs against a real Loki in tests/integration/test_loki_source.py."""

from __future__ import annotations

import json

from fleetmedic.adapters.loki import Entry
from fleetmedic.agent.lokicursor import SEEN_MAX, SETTLE, Cursor, FileCursor, _hash
from fleetmedic.agent.lokisource import with_filter


def e(ts: int, line: str, node: str = "n1") -> Entry:
    return Entry({"node_name": node}, ts, line)


def test_the_cursor_skips_what_was_handled_even_at_the_same_timestamp(tmp_path):
    c = Cursor()
    batch = [e(1, "a"), e(2, "b"), e(2, "c")]
    assert c.new("q", batch) == batch
    c.advance("q", batch)
    store = FileCursor(tmp_path / "cursor.json")
    store.save(c)
    c = store.load()  # a restart
    again = [e(2, "b"), e(2, "c"), e(2, "d"), e(3, "e")]  # Loki's start is inclusive
    assert [x.line for x in c.new("q", again)] == ["d", "e"]
    c.advance("q", c.new("q", again))
    assert c.new("q", [e(3, "e"), e(3, "f")]) == [e(3, "f")]
    assert c.new("other", again) == again, "each query has its own cursor"


S = 10**9  # one second in Loki's nanoseconds


def test_a_line_older_than_the_newest_handled_is_read_within_the_settle_window(tmp_path):
    """Node B's batch reaches Loki after node A's newer line (one query, two streams)."""
    c = Cursor()
    c.advance("q", [e(100 * S, "a", node="A")])
    late = e(99 * S, "b", node="B")
    assert c.new("q", [late]) == [late], "within the window: read, not dropped"
    c.advance("q", [late])
    assert c.new("q", [late, e(100 * S, "a", node="A")]) == [], "each handled once"
    assert c.floor("q") == 100 * S - SETTLE
    c.advance("q", [e(100 * S + SETTLE + 5 * S, "c")])
    assert c.new("q", [e(101 * S, "too late")]) == [], "older than the window: dropped"
    assert c.floor("q") == 105 * S
    kept = c.done["q"][1]
    assert len(kept) == 1, "lines below the floor are forgotten"
    store = FileCursor(tmp_path / "cursor.json")
    store.save(c)
    assert store.load().done == c.done


def test_a_cursor_written_before_the_window_reads_the_same():
    text = json.dumps({"q": {"ts": 7, "at": [_hash(e(7, "x"))]}})
    old = Cursor.parse(text, "a cursor file of an earlier version")
    assert old.new("q", [e(7, "x"), e(7, "y"), e(6, "z"), e(8, "w")]) == [e(7, "y"), e(8, "w")]


def test_a_storm_shortens_the_window_instead_of_growing_the_cursor():
    c = Cursor()
    c.advance("q", [e(i, f"line {i}") for i in range(SEEN_MAX + 500)])
    floor, seen = c.done["q"]
    assert len(seen) == SEEN_MAX and floor == 500
    assert c.new("q", [e(499, "late"), e(500, "line 500"), e(600, "new")]) == [e(600, "new")]


def test_an_unreadable_cursor_starts_over_rather_than_failing(tmp_path):
    path = tmp_path / "cursor.json"
    path.write_text("{not json")
    assert FileCursor(path).load().done == {}
    assert FileCursor(tmp_path / "missing.json").load().done == {}
    assert Cursor.parse('{"q": {"ts": "x"}}', "configmap key").done == {}
    assert Cursor.parse(None, "an empty configmap key").done == {}


def test_queries_get_the_scanners_trigger_filter_unless_they_have_a_pipeline():
    q = with_filter('{transport="kernel"}', ["NVRM", "NCCL WARN", "a.b"])
    assert q == '{transport="kernel"} |~ "NCCL\\\\ WARN|NVRM|a\\\\.b"'
    own = '{job="x"} |= "Xid"'
    assert with_filter(own, ["NVRM"]) == own


def test_empty_selectors_mean_the_shippers_defaults():
    from fleetmedic.agent.lokisource import (
        KERNEL_QUERIES,
        NODE_LABELS,
        POD_QUERIES,
        LokiSourceConfig,
    )

    cfg = LokiSourceConfig("http://loki:3100", kernel_queries=(), pod_queries=(), node_labels=())
    assert (cfg.kernel_queries, cfg.pod_queries, cfg.node_labels) == (
        KERNEL_QUERIES,
        POD_QUERIES,
        NODE_LABELS,
    )
    own = LokiSourceConfig("http://loki:3100", kernel_queries=('{job="dmesg"}',))
    assert own.kernel_queries == ('{job="dmesg"}',)
