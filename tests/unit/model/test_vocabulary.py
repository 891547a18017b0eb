import pytest

from fleetmedic.model import nodestate
from fleetmedic.model.vocabulary import preset, presets


def node(taints=(), labels=None, annotations=None, addresses=(), conditions=()):
    return {
        "metadata": {
            "name": "n1",
            "labels": labels or {},
            "annotations": annotations or {},
            "resourceVersion": "7",
        },
        "spec": {"taints": list(taints)},
        "status": {"addresses": list(addresses), "conditions": list(conditions)},
    }


def test_presets_have_default_and_ossci():
    assert {"default", "ossci"} <= set(presets())
    assert preset("ossci").reboot.key == "repair-reboot"
    assert preset("default").manual.as_taint() == {
        "key": "fleetmedic.io/repair",
        "value": "manual",
        "effect": "NoSchedule",
    }


def test_diagnose_is_the_mildest_fence_in_both_presets():
    from fleetmedic.model.actions import fence_state
    from fleetmedic.model.vocabulary import REPAIR_STATES

    assert REPAIR_STATES[0] == "diagnose" and fence_state("diagnose") == "diagnose"
    assert preset("default").diagnose.as_taint() == {
        "key": "fleetmedic.io/repair",
        "value": "diagnose",
        "effect": "NoSchedule",
    }
    assert preset("ossci").diagnose.key == "repair-diagnose"
    # a stronger fence on the same node wins: diagnose never hides a reset
    taints = [preset().diagnose.as_taint(), preset().reset.as_taint()]
    assert preset().repair_state_of(taints) == "reset"


def test_unknown_preset_is_one_line_error():
    with pytest.raises(ValueError, match="unknown taint preset 'nope'"):
        preset("nope")


@pytest.mark.parametrize("name", ["default", "ossci"])
@pytest.mark.parametrize("state", ["diagnose", "reboot", "reimage", "replace", "manual"])
def test_state_from_our_taint(name, state):
    vocab = preset(name)
    v = nodestate.view(node([vocab.repair(state).as_taint()]), vocab)
    assert v.state == state and v.in_repair


def test_foreign_and_wrong_effect_taints_are_not_ours():
    vocab = preset()
    foreign = {"key": "fleetmedic.io/repair", "value": "reboot", "effect": "NoExecute"}
    other = {"key": "team/x", "value": "reboot", "effect": "NoSchedule"}
    v = nodestate.view(node([foreign, other]), vocab)
    assert v.state == "healthy"
    assert not vocab.is_ours(foreign) and not vocab.is_ours(other)


def test_furthest_step_wins_and_slow_network_is_separate():
    vocab = preset()
    v = nodestate.view(
        node([vocab.reboot.as_taint(), vocab.manual.as_taint(), vocab.slow_network.as_taint()]),
        vocab,
    )
    assert v.state == "manual" and v.slow_network


def test_address_override_vendor_and_foreign_signals():
    vocab = preset()
    n = node(
        [{"key": "trainy.konduktor.ai/faulty", "value": "true", "effect": "NoSchedule"}],
        labels={"fleetmedic.io/gpu-vendor": "amd"},
        annotations={"fleetmedic.io/ssh-host": "10.0.0.9"},
        addresses=[{"type": "InternalIP", "address": "192.168.1.2"}],
        conditions=[{"type": "GPUProblem", "status": "True"}],
    )
    signals = [
        nodestate.ForeignSignal("taint", "trainy.konduktor.ai/faulty"),
        nodestate.ForeignSignal("condition", "GPUProblem", "True"),
        nodestate.ForeignSignal("taint", "gpu-healthcheck.aws-samples.io/unhealthy"),
    ]
    v = nodestate.view(n, vocab, signals)
    assert v.address == "10.0.0.9" and v.vendor == "amd"
    assert v.foreign_signals == ("taint trainy.konduktor.ai/faulty", "condition GPUProblem=True")
    assert v.state == "healthy"


def test_replace_is_between_reimage_and_manual_in_both_presets():
    assert preset("default").replace.as_taint()["value"] == "replace"
    assert preset("ossci").replace.key == "repair-replace"
    vocab = preset()
    taints = [vocab.reimage.as_taint(), vocab.replace.as_taint()]
    assert vocab.repair_state_of(taints) == "replace"
    assert vocab.repair_state_of([*taints, vocab.manual.as_taint()]) == "manual"
