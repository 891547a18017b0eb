"""The executor section: which runs go to which execution node."""

from __future__ import annotations

import pytest

from fleetmedic.errors import ConfigError
from fleetmedic.model import config

MESH = {"socket": "/run/receptor/receptor.sock", "tls_client": "mesh-client"}


def test_default_is_local_everywhere():
    cfg = config.parse({})
    assert cfg.executor.receptor is None
    assert cfg.executor.route({"site": "a"}) is None


def test_routes_by_label_with_a_default():
    cfg = config.parse(
        {
            "executor": {
                "receptor": MESH,
                "label": "site",
                "routes": {"a": "exec-1", "b": "exec-2", "hq": "local"},
                "default": "exec-1",
            }
        }
    )
    ex = cfg.executor
    assert ex.route({"site": "a"}) == "exec-1"
    assert ex.route({"site": "b"}) == "exec-2"
    assert ex.route({"site": "hq"}) is None
    assert ex.route({"site": "elsewhere"}) == "exec-1"
    assert ex.route({}) == "exec-1"
    assert ex.receptor is not None and ex.receptor.tls_client == "mesh-client"
    assert ex.receptor.sign_work and ex.receptor.work_type == "ansible-runner"


def test_relative_socket_is_relative_to_the_config(tmp_path):
    cfg = config.parse({"executor": {"receptor": {"socket": "rx.sock"}}}, base=tmp_path)
    assert cfg.executor.receptor is not None
    assert cfg.executor.receptor.socket == tmp_path / "rx.sock"


@pytest.mark.parametrize(
    ("section", "says"),
    [
        ({"label": "site", "routes": {"a": "exec-1"}}, "no `receptor:` mesh"),
        ({"default": "exec-1"}, "no `receptor:` mesh"),
        ({"receptor": MESH, "routes": {"a": "exec-1"}}, "needs the `label`"),
        ({"receptor": {**MESH, "poll_interval": 0}}, "poll_interval"),
        ({"receptor": MESH, "lable": "site"}, "lable"),
        ({"receptor": {**MESH, "direct_results": True, "max_in_flight": 1}}, "needs `signing_key`"),
        (
            {"receptor": {**MESH, "direct_results": True, "signing_key": "/k.pem"}},
            "`direct_results` with `max_in_flight: 2` wedges stock Receptor 1.4.4's links",
        ),
        ({"receptor": {**MESH, "signing_key": "/k.pem"}}, "only used with `direct_results: true`"),
    ],
)
def test_bad_sections_are_one_line(section, says):
    with pytest.raises(ConfigError, match="executor") as exc:
        config.parse({"executor": section})
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_a_profile_has_its_own_executor():
    cfg = config.parse(
        {
            "executor": {"receptor": MESH, "label": "site", "routes": {"a": "exec-1"}},
            "profiles": [
                {"name": "far", "selector": "pool=far", "executor": {"default": "exec-2"}}
            ],
        }
    )
    assert cfg.executor.route({}) is None
    far = cfg.profile("far").executor
    assert far.route({}) == "exec-2"
    assert far.route({"site": "a"}) == "exec-1"  # the top level's routes still apply


def test_direct_results_is_opt_in_and_needs_a_key_only_when_signing(tmp_path):
    mesh = config.parse({"executor": {"receptor": MESH}}).executor.receptor
    assert mesh is not None and not mesh.direct_results and mesh.signing_key is None
    on = {**MESH, "direct_results": True, "signing_key": "work-private.pem", "max_in_flight": 1}
    mesh = config.parse({"executor": {"receptor": on}}, base=tmp_path).executor.receptor
    assert mesh is not None and mesh.signing_key == tmp_path / "work-private.pem"
    unsigned = {**MESH, "direct_results": True, "sign_work": False, "max_in_flight": 1}
    mesh = config.parse({"executor": {"receptor": unsigned}}).executor.receptor
    assert mesh is not None and mesh.direct_results and mesh.signing_key is None


def test_direct_results_in_parallel_only_on_the_operators_word_that_receptor_is_fixed():
    """Stock Receptor 1.4.4 wedges links with direct reads and several units in flight
    per node: refused (above) unless one at a time, or the operator says it is patched."""
    direct = {**MESH, "direct_results": True, "sign_work": False}
    for extra, cap in (({"max_in_flight": 1}, 1), ({"patched_receptor": True}, 2)):
        mesh = config.parse({"executor": {"receptor": {**direct, **extra}}}).executor.receptor
        assert mesh is not None and mesh.direct_results and mesh.max_in_flight == cap
    plain = config.parse({"executor": {"receptor": {**MESH, "max_in_flight": 8}}})
    assert plain.executor.receptor is not None and not plain.executor.receptor.patched_receptor
