"""adapters/slurmread.py: the single-node read of Slurm 22.05 and later (``sinfo -n N`` in
text, one node and the partition table) parsed into sinfo --json's node shape. The lines
below are what a real sinfo 22.05.8 (or, where said, 24.11.5) printed (``cat -A`` showed
the separators); the read itself runs against slurmctld in
tests/integration/test_slurm_adapter.py, its cost in sdiag in bench/slurm_agents.py."""

from __future__ import annotations

import pytest

from fleetmedic.adapters.slurm import SlurmNode
from fleetmedic.adapters.slurmread import (
    UnreadableNode,
    parse_sinfo_single,
    parse_version,
    reader_for,
    sinfo_single,
    sinfo_single_argv,
)

U, R = "\x1f", "\x1e"


def line(*cells: str) -> str:
    return U.join(cells) + R + "\n"


IDLE = line("n1", "idle", "none", "Unknown", "Unknown", "192.168.224.11", "gpu", "gpu:2",
            "(null)", "(null)", "(null)")  # fmt: skip
OURS = line("n1", "idle+drain", "fleetmedic: reboot: xid 79 | x", "root(0)", "1795879944",
            "192.168.224.11", "gpu", "gpu:h100:2(S:0)", "nvidia,ib", "RMA 4711",
            '{"fleetmedic":{"a":"b c"}}')  # fmt: skip


def test_an_idle_node_reads_as_sinfo_json_would_show_it():
    n = SlurmNode.from_json(parse_sinfo_single(IDLE, "n1"))
    assert (n.state, n.flags, n.reason, n.reason_user) == ("idle", set(), "", "")
    assert n.reason_time is None
    assert (n.address, n.partitions, n.gres, n.features, n.comment, n.extra) == (
        "192.168.224.11", ("gpu",), "gpu:2", "", "", "",
    )  # fmt: skip
    assert n.boot_time is None, "22.05's single-node read has no boot time"


def test_our_drain_with_its_record_reads_whole():
    n = SlurmNode.from_json(parse_sinfo_single(OURS, "n1"))
    assert n.flags == {"DRAIN"} and n.drain and n.drained
    assert n.reason == "fleetmedic: reboot: xid 79 | x"
    assert (n.reason_user, n.reason_time) == ("root", 1795879944)
    assert n.record == {"a": "b c"} and n.comment == "RMA 4711"
    assert (n.gres, n.features) == ("gpu:h100:2(S:0)", "nvidia,ib")


def test_no_reason_on_a_node_slurm_conf_defined_reads_as_none_though_it_shows_a_user():
    # a powered-down CLOUD node of the big test cluster, as sinfo 22.05.8 printed it
    text = line("gpu0002", "idle+cloud+powered_down", "none", "root(0)", "Unknown", "gpu0002",
                "gpu", "(null)", "(null)", "(null)", "(null)")  # fmt: skip
    n = SlurmNode.from_json(parse_sinfo_single(text, "gpu0002"))
    assert n.reason == "" and n.flags == {"CLOUD", "POWERED_DOWN"}


def test_a_reason_someone_set_to_none_is_a_reason():
    text = line("n2", "idle+drain", "none", "alice(1000)", "1795879944", "a", "gpu", "gpu:2",
                "(null)", "(null)", "(null)")  # fmt: skip
    n = SlurmNode.from_json(parse_sinfo_single(text, "n2"))
    assert n.reason == "none" and n.reason_user == "alice"


def test_a_reason_left_on_a_resumed_node_is_no_reason():
    """24.11.5 keeps a resumed node's last reason (its sinfo printed these two lines, one
    before and one after ``state=resume``): in service, it is a leftover, not a drain."""
    drained = line("n1", "idle+drain", "NHC: gpu 3 missing", "root(0)", "1795918097",
                   "192.168.224.11", "gpu", "gpu:2", "(null)", "(null)", "(null)")  # fmt: skip
    resumed = drained.replace("idle+drain", "idle+not_responding")
    n = SlurmNode.from_json(parse_sinfo_single(drained, "n1"))
    assert (n.reason, n.reason_user, n.reason_time) == ("NHC: gpu 3 missing", "root", 1795918097)
    n = SlurmNode.from_json(parse_sinfo_single(resumed, "n1"))
    assert (n.reason, n.reason_user, n.reason_time) == ("", "", None)
    assert n.flags == {"NOT_RESPONDING"} and not n.drain


def test_a_node_in_two_partitions_is_two_lines_and_one_node():
    text = OURS + OURS.replace(f"{U}gpu{U}", f"{U}debug{U}")
    n = SlurmNode.from_json(parse_sinfo_single(text, "n1"))
    assert n.partitions == ("gpu", "debug")


def test_flags_and_states_as_slurm_names_them():
    text = IDLE.replace(f"{U}idle{U}", f"{U}down+drain+reboot_issued+not_responding{U}")
    n = SlurmNode.from_json(parse_sinfo_single(text, "n1"))
    assert n.state == "down" and n.flags == {"DRAIN", "REBOOT_ISSUED", "NOT_RESPONDING"}


def test_an_extra_with_newlines_and_separators_reads_back_as_it_is():
    extra = "not json\nsecond line | x"
    n = SlurmNode.from_json(parse_sinfo_single(IDLE.replace(f"(null){R}", f"{extra}{R}"), "n1"))
    assert n.extra == extra


def test_an_unknown_node_is_no_line_at_all():
    with pytest.raises(LookupError):
        parse_sinfo_single("", "nope")


@pytest.mark.parametrize(
    "text", [f"n1{U}idle{R}\n", IDLE.replace("n1", "n2", 1), IDLE.replace("idle", "n/a", 1)]
)
def test_an_answer_of_another_shape_is_refused(text):
    with pytest.raises(UnreadableNode):
        parse_sinfo_single(text, "n1")


def test_the_read_asks_for_one_node_by_name_with_epoch_times():
    seen = {}

    def run(tool, *args, env=None):
        seen.update(tool=tool, args=args, env=env)
        return IDLE

    sinfo_single(run, "n1")
    assert seen["tool"] == "sinfo" and seen["args"][:2] == ("-n", "n1")
    assert seen["env"] == {"SLURM_TIME_FORMAT": "%s"}
    assert sinfo_single_argv("n1")[-1].endswith(f"Extra:0{R}")


def test_versions():
    assert parse_version("slurm-wlm 22.05.8\n") == (22, 5)
    assert parse_version("slurm 24.11.5") == (24, 11)
    assert reader_for((22, 5)) is sinfo_single and reader_for((25, 5)) is sinfo_single
    with pytest.raises(UnreadableNode, match=r"22\.05 or later"):
        reader_for((21, 8))
