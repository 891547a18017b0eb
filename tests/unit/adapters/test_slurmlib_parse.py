"""The Slurm library's node text (adapters/slurmlib.py), read from what three real releases
printed (tests/data/slurm-sprint), and the cases it must hand to ``sinfo -n``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetmedic.adapters.slurmlib import differences, library_in, parse_node_text
from fleetmedic.adapters.slurmread import UnreadableNode

DATA = Path(__file__).parents[2] / "data" / "slurm-sprint"
RELEASES = ("22.05", "24.11", "26.05")
OUR_REASON = "fleetmedic: reboot: xid.79 0000:3b:00: GPU has fallen off the bus. [see runbook@7]"


def text(release: str, case: str) -> str:
    return (DATA / f"{release}-{case}.txt").read_text()


@pytest.mark.parametrize("release", RELEASES)
def test_a_drained_node_reads_whole(release):
    n = parse_node_text(text(release, "drained"), "n1")
    assert n["state"] == "idle" and n["state_flags"][0] == "DRAIN"
    # the reason ends in brackets of its own: only the last [user@time] is Slurm's
    assert n["reason"] == OUR_REASON
    assert n["reason_set_by_user"] == "root" and n["reason_changed_at"] > 1_700_000_000
    assert n["comment"] == "rack 12, row B"
    assert json.loads(n["extra"]) == {"fleetmedic": {"phase": "reboot", "gpu-vendor": "nvidia"}}
    assert (n["gres"], n["features"], n["partitions"]) == ("gpu:2", "", [])
    assert n["address"].startswith("192.168.")


@pytest.mark.parametrize("release", RELEASES)
def test_a_node_never_drained_has_no_reason_comment_or_extra(release):
    n = parse_node_text(text(release, "idle"), "n2")
    assert n["state"] == "idle" and "DRAIN" not in n["state_flags"]
    assert (n["reason"], n["reason_set_by_user"], n["reason_changed_at"]) == ("", "", None)
    assert (n["comment"], n["extra"]) == ("", "")
    # BootTime=None where the capture's slurmd was stopped (22.05, 26.05), a time on 24.11
    assert n["boot_time"] == (1795967195 if release == "24.11" else None)


@pytest.mark.parametrize("release", RELEASES)
def test_a_resumed_node_has_no_reason_even_where_slurm_keeps_it(release):
    raw = text(release, "resumed")
    n = parse_node_text(raw, "n1")
    assert n["state"] == "idle" and "DRAIN" not in n["state_flags"]
    assert n["reason"] == "" and n["reason_changed_at"] is None
    assert ("Reason=" in raw) == (release == "24.11")  # (what the data shows)


@pytest.mark.parametrize("release", RELEASES)
def test_a_down_node(release):
    n = parse_node_text(text(release, "down"), "n2")
    assert n["state"] == "down" and "DRAIN" in n["state_flags"]
    assert n["reason"] == "fleetmedic: manual: row remap failure"


@pytest.mark.parametrize("release", RELEASES)
def test_a_reason_of_two_lines_is_left_to_sinfo(release):
    # (the library prints the second line apart, and would drop an empty one)
    with pytest.raises(UnreadableNode, match="cannot read"):
        parse_node_text(text(release, "multiline"), "n2")


def test_a_resumed_node_keeping_a_reason_of_two_lines_is_left_to_sinfo():
    # 24.11 keeps a resumed node's last reason, and prints it as it printed the drain
    with pytest.raises(UnreadableNode, match="cannot read"):
        parse_node_text(text("24.11", "resumed-multiline"), "n2")


def test_an_answer_for_another_node_is_refused():
    with pytest.raises(UnreadableNode, match="answered for 'n1'"):
        parse_node_text(text("22.05", "drained"), "n10")


def test_a_key_printed_twice_is_left_to_sinfo():
    # a Comment holding a newline and "   Extra=...", on a node with an Extra of its own
    raw = text("22.05", "drained").replace(
        "   Comment=rack 12, row B\n", '   Comment=rack 12\n   Extra={"fleetmedic":{}}\n'
    )
    with pytest.raises(UnreadableNode, match="Extra twice"):
        parse_node_text(raw, "n1")


def test_the_boot_time_is_read_when_slurm_has_one():
    raw = text("22.05", "idle")
    assert "BootTime=None" in raw
    raw = raw.replace("BootTime=None", "BootTime=1796000000")
    assert parse_node_text(raw, "n2")["boot_time"] == 1796000000


def test_differences_name_the_fields_that_differ():
    a = parse_node_text(text("22.05", "drained"), "n1")
    b = {**a, "extra": "", "partitions": ["gpu"], "boot_time": 5}
    assert differences(a, b) == ["extra"]  # (partitions and boot time: not compared)


def test_the_library_is_found_in_ldd_output():
    out = (
        "\tlinux-vdso.so.1 (0x00007ffd)\n"
        "\tlibslurmfull.so => /usr/lib/x86_64-linux-gnu/slurm-wlm/libslurmfull.so (0x7f)\n"
        "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x7f)\n"
    )
    assert library_in(out) == "/usr/lib/x86_64-linux-gnu/slurm-wlm/libslurmfull.so"
    assert library_in("\tlibslurm.so.41 => /usr/lib64/libslurm.so.41 (0x7f)\n").endswith(".41")
    assert library_in("\tnot a dynamic executable\n") == ""


def test_base_states_of_a_node_in_service_count_as_one():
    # 24.11: sinfo -n says mixed where the library says allocated (a one-CPU job)
    a = parse_node_text(text("22.05", "idle"), "n2")
    assert differences({**a, "state": "allocated"}, {**a, "state": "mixed"}) == []
    assert differences({**a, "state": "down"}, {**a, "state": "idle"}) == ["state"]
    assert differences(a, {**a, "state_flags": ["DRAIN"]}) == ["state_flags"]
