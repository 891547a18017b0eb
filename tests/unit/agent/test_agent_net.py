"""The net, visible (issue 39 item 5): a driver line no rule knows is counted on the Node
with its last line (for ``fleetmedic status``), never fenced; the journal is read with its
priority, so an err-level driver line counts even when its words say nothing."""

from __future__ import annotations

import json
import stat
import threading

from agent_helpers import Node

from fleetmedic.agent.logsource import journal_now
from fleetmedic.model import keys
from fleetmedic.scan import Scanner
from fleetmedic.scan.stream import follow_journal

QUIET_ERR = "amdgpu 0000:c5:00.0: amdgpu: VPE queue 3 went away"  # no failure word in it


def test_an_err_level_line_no_rule_knows_is_counted_with_its_last_line(tmp_path):
    node = Node(tmp_path)
    node.log.write_text(
        f"3,1001,100000000,-;{QUIET_ERR}\n"  # /dev/kmsg records: priority 3 (err)
        f"6,1002,100500000,-;{QUIET_ERR}\n"  # the same at info: nothing
        "3,1003,200000000,-;amdgpu 0000:c5:00.0: amdgpu: another unknown thing happened\n"
    )
    node.run_once()
    net = node.kube.ann(keys.ANN_MONITOR_COUNTS)["net"]
    assert (net["n"], net["rule"]) == (2, "amdgpu.unclassified")
    assert net["last"] == "amdgpu 0000:c5:00.0: amdgpu: another unknown thing happened"
    assert not {t for t in node.kube.taints() if t.startswith("fleetmedic.io/")}
    writes = node.kube.writes
    node.run_once()  # a restart reads the same lines again: nothing counts twice
    assert node.kube.ann(keys.ANN_MONITOR_COUNTS)["net"]["n"] == 2 and node.kube.writes == writes


def fake_journalctl(tmp_path, records: list[dict]) -> str:
    path = tmp_path / "journalctl"
    body = "\n".join(json.dumps(r) for r in records)
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\nnot json: -- No entries --\n{body}\nEOF\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


RECORDS = [
    {
        "PRIORITY": "3",
        "MESSAGE": QUIET_ERR,
        "__REALTIME_TIMESTAMP": "1764331200000000",
        "_HOSTNAME": "gpu-1",
        "SYSLOG_IDENTIFIER": "kernel",
    },
    {
        "PRIORITY": "6",
        "MESSAGE": QUIET_ERR.replace("3", "4"),
        "__REALTIME_TIMESTAMP": "1764331201000000",
        "_HOSTNAME": "gpu-1",
        "SYSLOG_IDENTIFIER": "kernel",
    },
    {
        "PRIORITY": "6",
        "MESSAGE": "amdgpu: [powerplay] \n failed to send message 200 ret is 0",
        "__REALTIME_TIMESTAMP": "1764331202000000",
        "_HOSTNAME": "gpu-1",
        "SYSLOG_IDENTIFIER": "kernel",
    },
]


def test_the_journal_keeps_each_records_priority(tmp_path):
    lines = list(journal_now(journalctl=fake_journalctl(tmp_path, RECORDS)))
    assert lines[0].startswith("<3>2025-11-28T12:00:00.000000+0000 gpu-1 kernel: amdgpu")
    found = list(Scanner(dedup=False).scan(lines))
    assert [(f.line, f.rule) for f in found] == [
        (1, "amdgpu.unclassified"),
        (3, "amdgpu.smu-failed"),
    ]
    assert found[0].clock == "wall"


def test_following_the_journal_gives_the_same_lines(tmp_path):
    stop = threading.Event()
    got = []
    for line in follow_journal(journalctl=fake_journalctl(tmp_path, RECORDS), stop=stop, poll=0.05):
        got.append(line)
        if len(got) == len(RECORDS):
            stop.set()
    assert got == list(journal_now(journalctl=fake_journalctl(tmp_path, RECORDS)))
