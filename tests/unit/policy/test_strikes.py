from hypothesis import given
from hypothesis import strategies as st

from fleetmedic.policy.strikes import Decision, Observation, Strikes, decide

BAD = Observation("gpu", "problem", "ecc")
GOOD = Observation("gpu", "ok", "ecc")
UNKNOWN = Observation("gpu", "unknown", "ecc")
NET_BAD = Observation("network", "problem", "throughput")
NET_OK = Observation("network", "ok", "throughput")


def run(seq, strikes=None, in_repair=False, slow=False):
    strikes = strikes or Strikes()
    decisions = []
    for obs in seq:
        d = decide(strikes, obs, in_repair=in_repair, slow_network=slow)
        strikes = d.strikes
        slow = slow if d.slow_network is None else d.slow_network
        decisions.append(d)
    return decisions


def test_three_gpu_strikes_fence_reboot():
    d = run([[BAD], [BAD], [BAD]])
    assert [x.repair for x in d] == [None, None, "reboot"]
    assert [x.strikes.gpu for x in d] == [1, 2, 0]


def test_pass_resets_and_unknown_holds():
    d = run([[BAD], [BAD], [GOOD], [BAD], [UNKNOWN], [BAD], [BAD]])
    assert [x.strikes.gpu for x in d] == [1, 2, 0, 1, 1, 2, 0]
    assert d[-1].repair == "reboot"


def test_restart_resumes_from_annotation():
    d1 = run([[BAD], [BAD]])
    restored = Strikes.from_json(d1[-1].strikes.to_json())
    assert decide(restored, [BAD], in_repair=False, slow_network=False).repair == "reboot"


def test_definitive_finding_acts_at_once_worst_wins():
    obs = [
        Observation("kernel", "problem", "xid79", "reboot"),
        Observation("gpu", "problem", "remap", "manual"),
    ]
    d = decide(Strikes(), obs, in_repair=False, slow_network=False)
    assert d.repair == "manual" and "remap" in d.reason


def test_in_repair_skips_gpu_and_clears_strikes_but_network_continues():
    d = decide(Strikes(gpu=2, network=2), [BAD, NET_BAD], in_repair=True, slow_network=False)
    assert d.repair is None and d.strikes.gpu == 0 and d.slow_network is True


def test_network_hysteresis():
    d = run([[NET_BAD], [NET_BAD], [NET_BAD], [NET_BAD], [NET_OK]])
    assert [x.slow_network for x in d] == [None, None, True, None, False]


def test_malformed_annotation_is_clean_slate():
    assert Strikes.from_json("garbage") == Strikes()
    assert Strikes.from_json({"gpu": -3, "network": "x"}) == Strikes()


obs = st.sampled_from([BAD, GOOD, UNKNOWN, NET_BAD, NET_OK])


@given(st.lists(st.lists(obs, max_size=3), max_size=30))
def test_never_fences_without_three_consecutive_problems(seq):
    consecutive = 0
    strikes, slow = Strikes(), False
    for step in seq:
        d: Decision = decide(strikes, step, in_repair=False, slow_network=slow)
        gpu = [o for o in step if o.category == "gpu"]
        if any(o.status == "problem" for o in gpu):
            consecutive += 1
        elif gpu and all(o.status == "ok" for o in gpu):
            consecutive = 0
        if d.repair:
            assert consecutive >= 3
            consecutive = 0
        assert d.repair in (None, "reboot")
        strikes = d.strikes
        slow = slow if d.slow_network is None else d.slow_network


def test_a_reset_finding_fences_at_the_reset_rung():
    d = decide(
        Strikes(gpu=1),
        [Observation("kernel", "problem", "Xid 119 on 0000:9b:00", "reset")],
        in_repair=False,
        slow_network=False,
    )
    assert d.repair == "reset" and d.strikes.gpu == 0
    worse = decide(
        Strikes(),
        [
            Observation("kernel", "problem", "Xid 119", "reset"),
            Observation("gpu", "problem", "nvidia.remap", "manual"),
        ],
        in_repair=False,
        slow_network=False,
    )
    assert worse.repair == "manual"
