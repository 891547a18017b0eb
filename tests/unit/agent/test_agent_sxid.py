"""Issue 39's target on the agent: a fatal SXid fences, a non-fatal one does not, whatever
the catalog once said about its code (published lines: gpud's tests, 12028 Non-fatal;
Red Hat solution 6619941 via gpud, 20034 Fatal). The rung is the Fabric Manager guide
2.3's: a fatal SXid resets the GPUs, an always-fatal one (Table 23) reboots."""

from __future__ import annotations

from agent_helpers import REBOOT, Node

RESET = "fleetmedic.io/repair=reset"

NON_FATAL = (
    "[  111.111111] nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, "
    "Link 32 egress non-posted PRIV error (First)\n"
)
FATAL = (
    "[131453.740743] nvidia-nvswitch0: SXid (PCI:0000:a9:00.0): 20034, Fatal, "
    "Link 30 LTSSM Fault Up\n"
)


def ours(node: Node) -> set[str]:
    return {t for t in node.kube.taints() if t.startswith("fleetmedic.io/")}


def test_a_non_fatal_sxid_does_not_fence_and_a_fatal_one_does(tmp_path):
    node = Node(tmp_path)
    node.log.write_text(NON_FATAL * 20)  # a storm of them: still non-fatal, never counted
    node.run_once()
    assert ours(node) == set()
    with open(node.log, "a") as f:
        f.write(FATAL)
    node.run_once()
    assert ours(node) == {RESET}


def test_an_always_fatal_sxid_fences_for_a_reboot(tmp_path):
    node = Node(tmp_path)
    node.log.write_text(
        "[  222.222222] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 12020, Fatal, "
        "Link 07 egress sequence ID error\n"
    )
    node.run_once()
    assert ours(node) == {REBOOT}
