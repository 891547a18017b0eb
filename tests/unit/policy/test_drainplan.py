"""Which pods a drain evicts and why the others stay (policy/drainplan.py): kubectl's rules,
fleetmedic's GPU-only mode, and the reasons a refused pod is reported with."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetmedic.policy.drainplan import (
    EMPTYDIR,
    NO_CONTROLLER,
    Fate,
    Rules,
    decide,
    plan,
    refusal_hint,
    uses_gpu,
)


def pod(
    name="p",
    *,
    owner="ReplicaSet",
    controller=True,
    mirror=False,
    phase="Running",
    terminating=False,
    volumes=(),
    gpu=None,
    init_gpu=None,
    grace=None,
) -> dict:
    meta: dict = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "o", "controller": controller}]
    if mirror:
        meta["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    if terminating:
        meta["deletionTimestamp"] = "2026-11-23T10:00:00Z"
    spec: dict = {"containers": [{"name": "main"}], "volumes": list(volumes)}
    if gpu:
        spec["containers"].append({"name": "gpu", "resources": gpu})
    if init_gpu:
        spec["initContainers"] = [{"name": "init", "resources": init_gpu}]
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


EMPTY = {"name": "scratch", "emptyDir": {}}
SHM = {"name": "shm", "emptyDir": {"medium": "Memory"}}
CONFIG = {"name": "cfg", "configMap": {"name": "c"}}


class TestKubectlRules:
    @pytest.mark.parametrize(
        ("p", "fate", "why"),
        [
            (pod(), Fate.EVICT, "workload"),
            (pod(owner="StatefulSet"), Fate.EVICT, "workload"),
            (pod(owner="Job", volumes=[CONFIG]), Fate.EVICT, "workload"),
            (pod(owner="DaemonSet"), Fate.LEAVE, "DaemonSet"),
            (pod(owner=None, mirror=True), Fate.LEAVE, "mirror"),
            (pod(phase="Succeeded", owner=None), Fate.LEAVE, "finished"),
            (pod(phase="Failed", volumes=[EMPTY]), Fate.LEAVE, "finished"),
            (pod(terminating=True, owner=None), Fate.WAIT, "terminating"),
            (pod(owner=None), Fate.REFUSE, NO_CONTROLLER),
            # an owner that is not the controller is no controller, as kubectl's GetControllerOf
            (pod(controller=False), Fate.REFUSE, NO_CONTROLLER),
            # a DaemonSet that only owns (does not control) the pod does not make it one of its
            (pod(owner="DaemonSet", controller=False), Fate.REFUSE, NO_CONTROLLER),
            (pod(volumes=[EMPTY]), Fate.REFUSE, EMPTYDIR),
            (pod(volumes=[SHM]), Fate.REFUSE, EMPTYDIR),  # memory-backed counts, as in kubectl
            (pod(owner=None, volumes=[EMPTY]), Fate.REFUSE, f"{NO_CONTROLLER} and {EMPTYDIR}"),
        ],
    )
    def test_default_rules_are_kubectls(self, p, fate, why):
        assert decide(p, Rules()) == (fate, why)

    def test_force_allows_pods_without_a_controller(self):
        assert decide(pod(owner=None), Rules(force=True)) == (Fate.EVICT, "workload")
        both = pod(owner=None, volumes=[EMPTY])
        assert decide(both, Rules(force=True)) == (Fate.REFUSE, EMPTYDIR)

    def test_delete_emptydir_data_allows_emptydir_pods(self):
        assert decide(pod(volumes=[SHM, EMPTY]), Rules(delete_emptydir_data=True))[0] is Fate.EVICT
        both = pod(owner=None, volumes=[EMPTY])
        assert decide(both, Rules(delete_emptydir_data=True)) == (Fate.REFUSE, NO_CONTROLLER)
        assert decide(both, Rules(force=True, delete_emptydir_data=True))[0] is Fate.EVICT

    def test_a_refusal_names_the_settings_that_allow_it(self):
        assert refusal_hint(NO_CONTROLLER) == "safety.drain.force"
        assert refusal_hint(EMPTYDIR) == "safety.drain.delete_emptydir_data"
        assert refusal_hint(f"{NO_CONTROLLER} and {EMPTYDIR}") == (
            "safety.drain.force and safety.drain.delete_emptydir_data"
        )

    def test_plan_keeps_order_uid_and_grace(self):
        got = plan([pod("a", grace=20), pod("b", owner="DaemonSet")], Rules())
        assert [(p.ref, p.uid, p.fate, p.grace) for p in got] == [
            ("ns/a", "uid-a", Fate.EVICT, 20),
            ("ns/b", "uid-b", Fate.LEAVE, 30),  # the API server's default grace
        ]


GPU = {"limits": {"nvidia.com/gpu": "1"}}


class TestGpuOnly:
    @pytest.mark.parametrize(
        "resources",
        [
            {"limits": {"nvidia.com/gpu": "8"}},
            {"limits": {"nvidia.com/gpu": 1}},
            {"requests": {"amd.com/gpu": "1"}, "limits": {"amd.com/gpu": "1"}},
            {"limits": {"nvidia.com/mig-1g.10gb": "2"}},
            {"limits": {"nvidia.com/gpu.shared": "1"}},  # time-sliced, renamed by the plugin
        ],
    )
    def test_gpu_resources_in_any_container(self, resources):
        assert uses_gpu(pod(gpu=resources))
        assert uses_gpu(pod(init_gpu=resources)), "init containers count"

    @pytest.mark.parametrize(
        "resources",
        [
            {},
            {"limits": {"cpu": "4", "memory": "1Gi"}},
            {"limits": {"nvidia.com/gpu": "0"}},
            {"limits": {"example.com/nvidia.com/gpu": "1"}},
            {"limits": {"nvidia.com/gpux": "1"}},
        ],
    )
    def test_not_gpu(self, resources):
        assert not uses_gpu(pod(gpu=resources))

    def test_gpu_only_leaves_other_pods_and_keeps_kubectls_rules_for_gpu_pods(self):
        rules = Rules(gpu_only=True)
        assert decide(pod(), rules) == (Fate.LEAVE, "no GPU")
        assert decide(pod(owner=None), rules) == (Fate.LEAVE, "no GPU"), "not even refused"
        assert decide(pod(gpu=GPU), rules) == (Fate.EVICT, "GPU")
        assert decide(pod(init_gpu=GPU), rules) == (Fate.EVICT, "GPU")
        assert decide(pod(gpu=GPU, owner=None), rules) == (Fate.REFUSE, NO_CONTROLLER)
        assert decide(pod(gpu=GPU, owner="DaemonSet"), rules) == (Fate.LEAVE, "DaemonSet")
        assert decide(pod(gpu=GPU, terminating=True), rules) == (Fate.WAIT, "terminating")


pods = st.builds(
    pod,
    owner=st.sampled_from([None, "ReplicaSet", "StatefulSet", "Job", "DaemonSet"]),
    controller=st.booleans(),
    mirror=st.booleans(),
    phase=st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
    terminating=st.booleans(),
    volumes=st.lists(st.sampled_from([EMPTY, SHM, CONFIG]), max_size=2),
    gpu=st.sampled_from([None, GPU, {"limits": {"cpu": "1"}}]),
)
rules = st.builds(Rules, st.booleans(), st.booleans(), st.booleans())


class TestProperties:
    @given(pods, rules)
    def test_mirror_and_daemonset_pods_are_never_evicted(self, p, r):
        fate, _ = decide(p, r)
        owner = p["metadata"].get("ownerReferences", [{}])[0]
        if "annotations" in p["metadata"] or (
            owner.get("kind") == "DaemonSet" and owner.get("controller")
        ):
            assert fate is Fate.LEAVE

    @given(pods, rules)
    def test_allowing_more_never_evicts_less(self, p, r):
        """Turning force or delete_emptydir_data on can only turn a refusal into an
        eviction, never the reverse, and changes nothing else."""
        before, _ = decide(p, r)
        after, _ = decide(p, Rules(True, True, r.gpu_only))
        if before is Fate.REFUSE:
            assert after is Fate.EVICT
        else:
            assert after is before

    @given(pods, rules)
    def test_gpu_only_evicts_a_subset(self, p, r):
        all_fate, _ = decide(p, Rules(r.force, r.delete_emptydir_data, False))
        gpu_fate, _ = decide(p, Rules(r.force, r.delete_emptydir_data, True))
        assert gpu_fate in (all_fate, Fate.LEAVE)
        if gpu_fate is not Fate.LEAVE:
            assert uses_gpu(p)

    @given(pods, rules)
    def test_every_refusal_has_a_setting_that_allows_it(self, p, r):
        fate, why = decide(p, r)
        if fate is Fate.REFUSE:
            assert refusal_hint(why).startswith("safety.drain.")
