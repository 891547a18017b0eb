import copy

from hypothesis import given
from hypothesis import strategies as st

from fleetmedic.model import nodeedit
from fleetmedic.model.vocabulary import preset

VOCAB = preset()
FOREIGN = {"key": "team.example/x", "value": "1", "effect": "NoSchedule"}


def node(taints=None, labels=None, annotations=None):
    return {
        "metadata": {
            "name": "n",
            "labels": labels or {},
            "annotations": annotations or {},
            "resourceVersion": "1",
        },
        "spec": {"taints": taints},
    }


def test_add_taint_is_idempotent_and_keeps_foreign():
    n = node([FOREIGN])
    assert nodeedit.add_taint(n, VOCAB.reboot)
    assert not nodeedit.add_taint(n, VOCAB.reboot)
    assert n["spec"]["taints"] == [FOREIGN, VOCAB.reboot.as_taint()]


def test_remove_only_exact_match():
    same_key_other_effect = {
        "key": "fleetmedic.io/repair",
        "value": "reboot",
        "effect": "NoExecute",
    }
    n = node([FOREIGN, same_key_other_effect, VOCAB.reboot.as_taint()])
    assert nodeedit.remove_taint(n, VOCAB.reboot)
    assert n["spec"]["taints"] == [FOREIGN, same_key_other_effect]
    assert not nodeedit.remove_taint(n, VOCAB.reboot)


def test_merge_patch_sends_whole_taint_list_and_nulls_removed_keys():
    old = node([FOREIGN], labels={"a": "1"}, annotations={"x": "1", "y": "2"})
    new = copy.deepcopy(old)
    nodeedit.add_taint(new, VOCAB.manual)
    nodeedit.set_annotation(new, "y", None)
    nodeedit.set_label(new, "b", "2")
    patch = nodeedit.merge_patch(old, new)
    assert patch == {
        "metadata": {"labels": {"b": "2"}, "annotations": {"y": None}},
        "spec": {"taints": [FOREIGN, VOCAB.manual.as_taint()]},
    }


def test_merge_patch_empty_when_nothing_changed():
    old = node([FOREIGN])
    assert nodeedit.merge_patch(old, copy.deepcopy(old)) == {}


def test_unschedulable_round_trip():
    n = node()
    assert nodeedit.set_unschedulable(n, True) and not nodeedit.set_unschedulable(n, True)
    assert nodeedit.merge_patch(node(), n) == {"spec": {"unschedulable": True}}


taint = st.fixed_dictionaries(
    {
        "key": st.sampled_from(["fleetmedic.io/repair", "a/b", "repair-reboot"]),
        "value": st.sampled_from(["reboot", "manual", "true", "1"]),
        "effect": st.sampled_from(["NoSchedule", "NoExecute"]),
    }
)


@given(st.lists(taint, max_size=6), st.sampled_from(["reboot", "reimage", "manual"]))
def test_add_then_remove_restores_foreign_taints(taints, state):
    n = node(copy.deepcopy(taints))
    name = VOCAB.repair(state)
    had = any(name.matches(t) for t in taints)
    nodeedit.add_taint(n, name)
    nodeedit.remove_taint(n, name)
    assert n["spec"]["taints"] == [t for t in taints if not name.matches(t)]
    assert had or n["spec"]["taints"] == taints
