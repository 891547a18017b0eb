"""Chat notifications through Apprise to a real HTTP receiver (tests/harness/webhook.py):
the payload of each event, secrets from a file or a systemd credential, a dead webhook
retried in the background while the caller goes on, and per-profile targets."""

from __future__ import annotations

import threading
import time

import pytest

from fleetmedic.adapters import chat
from fleetmedic.controller.chatter import Chatter
from fleetmedic.errors import ConfigError, TemporaryError
from fleetmedic.model import keys
from fleetmedic.model.config import TargetConfig, parse
from fleetmedic.model.nodestate import view
from fleetmedic.model.vocabulary import preset
from fleetmedic.policy.actions import Event, Update
from fleetmedic.policy.history import Attempt, encode

HISTORY = [
    Attempt(1, "reboot", 1, "2026-11-24T12:00:00Z", "2026-11-24T12:04:00Z", "fail", "verify"),
    Attempt(1, "reimage", 1, "2026-11-24T12:05:00Z", "2026-11-24T12:30:00Z", "fail", "verify"),
]


@pytest.fixture
def hook(webhook):
    return webhook


def node_view(name: str = "gpu-7", labels: dict | None = None):
    ann = {
        keys.ANN_HISTORY: encode(HISTORY),
        keys.ANN_LAST_FINDING: '{"kind": "xid", "code": 79, "gpu": 3}',
    }
    meta = {"name": name, "annotations": ann, "labels": labels or {}}
    return view({"metadata": meta, "spec": {}}, preset())


def test_escalation_payload_carries_the_emails_facts_shortened(hook):
    msg = chat.escalation(
        "gpu-7",
        "reimage attempt 1 fail at verify: Xid 79",
        node_view().annotation_json(keys.ANN_HISTORY, []),
        {"kind": "xid", "code": 79},
        episode=1,
        cluster="prod-a",
    )
    chat.send(TargetConfig(name="ops", url=hook.url("fleetmedic")), msg)
    got = hook.wait_for(lambda r: True)
    assert got.path == "/fleetmedic"
    assert got.body["type"] == "failure"
    # the title leads with the cause (the escalation's headline); the episode is in the body
    assert got.body["title"] == (
        "[fleetmedic] gpu-7 on prod-a needs hands: reimage attempt 1 fail at verify: Xid 79"
    )
    text = got.body["message"]
    assert "Why: reimage attempt 1 fail at verify: Xid 79 (episode 1)" in text
    assert "- reboot 1 fail at verify" in text and "- reimage 1 fail at verify" in text
    assert '"code": 79' in text
    assert text.endswith("When fixed: fleetmedic release gpu-7")
    assert len(text) <= chat.CHAT_LIMIT


def test_url_from_file_or_credential_and_errors_name_the_target_not_the_url(hook, tmp_path, caplog):
    (tmp_path / "url").write_text(hook.url("secret-path-XYZ") + "\n")
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "hook").write_text(hook.url("from-credential"))
    msg = chat.repaired("gpu-1", "reboot attempt 1 passed verify")
    chat.send(TargetConfig(name="f", url_file=tmp_path / "url"), msg)
    chat.send(
        TargetConfig(name="c", url_credential="hook"),
        msg,
        environ={"CREDENTIALS_DIRECTORY": str(creds)},
    )
    assert {r.path for r in hook.received} == {"/secret-path-XYZ", "/from-credential"}
    assert hook.received[0].body["type"] == "success"
    hook.failing = 1
    with pytest.raises(TemporaryError) as err:
        chat.send(TargetConfig(name="f", url_file=tmp_path / "url"), msg, timeout=2)
    assert "notify target f" in str(err.value) and "XYZ" not in str(err.value)
    assert "XYZ" not in caplog.text
    (tmp_path / "bad").write_text("nosuchscheme://x\n")
    with pytest.raises(ConfigError, match="notify target b: not an Apprise URL"):
        chat.send(TargetConfig(name="b", url_file=tmp_path / "bad"), msg)
    with pytest.raises(ConfigError, match=r"notify target m: cannot read .*missing"):
        chat.send(TargetConfig(name="m", url_file=tmp_path / "missing"), msg)


def config(hook, **notify):
    return parse(
        {
            "notify": {
                "retry_interval": 0.2,
                "targets": [
                    {"name": "all", "url": hook.url("all"), "events": list(chat_events())},
                    {"name": "pager", "url": hook.url("pager"), "events": ["escalation"]},
                ],
                **notify,
            },
            "profiles": [
                {
                    "name": "inference",
                    "selector": "pool=inference",
                    "notify": {"targets": [{"name": "inf", "url": hook.url("inference")}]},
                }
            ],
        }
    )


def chat_events():
    return ("escalation", "breaker", "repaired")


def test_a_dead_webhook_is_retried_in_the_background_and_never_blocks(hook):
    stop = threading.Event()
    chatter = Chatter(config(hook), lambda: stop)
    hook.failing = 2  # the first two POSTs get 503
    upd = Update(
        node="gpu-7",
        at="2026-11-24T12:31:00Z",
        events=(Event("RepairEscalated", "the ladder ran out: escalate to a human", "Warning"),),
    )
    started = time.monotonic()
    chatter.written(upd, node_view())
    assert time.monotonic() - started < 0.5  # queued, not sent on the caller's thread
    pager = hook.wait_for(lambda r: r.path == "/pager")
    allp = hook.wait_for(lambda r: r.path == "/all")
    for got in (pager, allp):
        assert got.body["title"].startswith("[fleetmedic] gpu-7 needs hands")
    assert [r.answered for r in hook.received].count(503) == 2
    assert len([r for r in hook.received if r.answered == 200]) == 2
    stop.set()


def test_events_pick_targets_and_a_profile_has_its_own(hook):
    stop = threading.Event()
    chatter = Chatter(config(hook), lambda: stop)
    repaired = Update(node="x", at="t", events=(Event("Repaired", "reboot 1 passed verify"),))
    chatter.written(repaired, node_view("gpu-1"))
    chatter.written(repaired, node_view("inf-1", {"pool": "inference"}))
    chatter.breaker("inference", ["inf-1", "inf-2"], 4, 600)
    chatter.breaker("default", ["gpu-1", "gpu-2"], 10, 600)
    hook.wait_for(lambda r: r.path == "/all" and "gpu-1 is back" in r.body["title"])
    got = hook.wait_for(lambda r: r.path == "/inference")
    assert (
        got.body["title"]
        == "[fleetmedic] circuit breaker open (profile inference): automation paused"
    )
    assert "fleetmedic breaker reset --profile inference" in got.body["message"]
    hook.wait_for(lambda r: r.path == "/all" and "breaker" in r.body["title"])
    stop.set()
    paths = sorted(r.path for r in hook.received)
    # the pager hears escalations only; the inference pool's target only what it asked for
    # (escalation and breaker by default), not the repaired node
    assert paths == ["/all", "/all", "/inference"]


def test_config_rejects_ambiguous_targets():
    with pytest.raises(ConfigError, match="exactly one of url, url_file, url_credential"):
        parse({"notify": {"targets": [{"name": "t"}]}})
    with pytest.raises(ConfigError, match="used twice"):
        parse({"notify": {"targets": [{"name": "t", "url": "json://a"}] * 2}})
    with pytest.raises(ConfigError, match="events"):
        parse({"notify": {"targets": [{"name": "t", "url": "json://a", "events": ["x"]}]}})
