"""The one notification path (controller/outbox.py): letters to a real HTTP receiver
(tests/harness/webhook.py) and a real SMTP relay (aiosmtpd), kept on the pause ConfigMap of
the file store a Slurm fleet uses and of the real kube-apiserver, retried while the target
is down, taken from the record by the next controller, and a once-letter never sent twice."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest

from fleetmedic.adapters import chat, notify
from fleetmedic.adapters import kube as kube_adapter
from fleetmedic.adapters.filestore import FileStore
from fleetmedic.controller import channels
from fleetmedic.controller.outbox import (
    RECORD_PREFIX,
    Channel,
    Ended,
    Letter,
    Outbox,
    record_key,
)
from fleetmedic.errors import TemporaryError
from fleetmedic.model.config import parse

REF = ("fleetmedic", "fleetmedic-pause")


def config(hook, smtp=None, **notify_cfg):
    raw = {
        "notify": {
            "retry_interval": 0.2,
            "tries": 5,
            "targets": [
                {"name": "ops", "url": hook.url("ops"), "events": ["escalation", "breaker"]},
                {"name": "bad", "url": "nosuchscheme://x", "events": ["breaker"]},
            ],
            **notify_cfg,
        }
    }
    if smtp is not None:
        raw["smtp"] = {
            "host": smtp.host,
            "port": smtp.port,
            "tls": "none",
            "to": ["oncall@example.test"],
            "from": "fleetmedic@example.test",
            "retry_interval": 0.2,
        }
    return parse(raw)


def record(store) -> dict[str, str]:
    cm = store.get_config_map(*REF) or {}
    return {k: v for k, v in (cm.get("data") or {}).items() if k.startswith(RECORD_PREFIX)}


def wait_until(cond, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def letter(cfg, title="[fleetmedic] gpu-7 needs hands", target="ops", once=False, id_=None):
    [t] = [t for t in cfg.notify.targets if t.name == target]
    msg = chat.Message("escalation", title, "Why: Xid 79")
    made = channels.chat_to(t, msg, id=id_ or f"escalation/gpu-7/{uuid.uuid4().hex}", what="t")
    return Letter(**{**made.__dict__, "once": once})


@pytest.fixture
def store(tmp_path):
    s = FileStore(tmp_path / "store")
    s.ensure_config_map(*REF)
    return s


def test_a_letter_is_on_the_record_until_a_dead_target_takes_it(webhook, store):
    cfg = config(webhook)
    stop = threading.Event()
    box = Outbox(cfg, channels.CHANNELS, stop=lambda: stop, store=store, ref=REF)
    webhook.failing = 3
    seen_on_record = []
    box.post(letter(cfg))
    wait_until(lambda: seen_on_record.append(bool(record(store))) or any(seen_on_record))
    got = webhook.wait_for(lambda r: r.answered == 200)
    assert got.body["title"] == "[fleetmedic] gpu-7 needs hands"
    assert [r.answered for r in webhook.received] == [503, 503, 503, 200]
    wait_until(lambda: not record(store))  # delivered: off the record
    stop.set()


def test_the_next_controller_sends_what_the_last_could_not(webhook, store):
    cfg = config(webhook)
    first_stop, leading = threading.Event(), threading.Event()
    first = Outbox(
        cfg, channels.CHANNELS, stop=lambda: first_stop, store=store, ref=REF, acting=leading.is_set
    )
    first.post(letter(cfg, "[fleetmedic] kept for the next one"))
    wait_until(lambda: bool(record(store)))
    first_stop.set()  # a follower, then gone: it never sent it
    assert not webhook.received
    [raw] = record(store).values()
    assert json.loads(raw)["target"] == "ops" and "json://" not in raw  # the name, not the URL

    stop = threading.Event()
    second = Outbox(cfg, channels.CHANNELS, stop=lambda: stop, store=store, ref=REF)
    second.restore()
    second.start()
    got = webhook.wait_for(lambda r: r.answered == 200)
    assert got.body["title"] == "[fleetmedic] kept for the next one"
    wait_until(lambda: not record(store))
    stop.set()
    assert len(webhook.received) == 1


def test_a_once_letter_is_never_sent_twice_even_after_a_restart(webhook, store):
    cfg = config(webhook)
    stop = threading.Event()
    box = Outbox(cfg, channels.CHANNELS, stop=lambda: stop, store=store, ref=REF)
    case = letter(cfg, "[fleetmedic] case 17", once=True, id_="ticket/case-17")
    box.post(case)
    webhook.wait_for(lambda r: r.answered == 200)
    wait_until(lambda: "sent" in json.loads(record(store)[record_key(case.id)]))
    box.post(case)  # the same case again: not queued
    stop.set()

    stop2 = threading.Event()
    again = Outbox(cfg, channels.CHANNELS, stop=lambda: stop2, store=store, ref=REF)
    again.restore()
    again.post(case)
    time.sleep(0.6)  # three retry intervals: a queued letter would have gone by now
    stop2.set()
    assert len(webhook.received) == 1
    assert again.pending() == []


def test_a_given_up_once_letter_is_not_tried_again_after_a_restart(webhook, store):
    cfg = config(webhook, tries=2)
    webhook.failing = 100
    stop = threading.Event()
    box = Outbox(cfg, channels.CHANNELS, stop=lambda: stop, store=store, ref=REF)
    case = letter(cfg, "[fleetmedic] case 18", once=True, id_="ticket/case-18")
    box.post(case)
    wait_until(lambda: "gave_up" in record(store).get(record_key(case.id), ""))
    stop.set()
    end = box.ended(case.id)
    assert end is not None and not end.sent and "given up after 2 tries" in end.note

    stop2 = threading.Event()
    again = Outbox(cfg, channels.CHANNELS, stop=lambda: stop2, store=store, ref=REF)
    again.restore()
    assert again.ended(case.id) == end, "the end, from the tombstone"
    again.post(case)
    time.sleep(0.6)  # three retry intervals: a queued letter would have gone by now
    stop2.set()
    assert len(webhook.received) == 2 and again.pending() == []


def test_a_tombstone_of_the_earlier_format_still_counts_as_delivered(webhook, store):
    cfg = config(webhook)
    case = letter(cfg, "[fleetmedic] case 19", once=True, id_="ticket/case-19")
    old = json.dumps({"id": case.id, "sent": "2099-01-01T00:00:00Z"})  # (a future: kept)
    store.patch_config_map_data(*REF, {record_key(case.id): old})
    stop = threading.Event()
    box = Outbox(cfg, channels.CHANNELS, stop=lambda: stop, store=store, ref=REF)
    box.restore()
    assert box.ended(case.id) == Ended(True, "", "2099-01-01T00:00:00Z")
    box.post(case)
    time.sleep(0.6)
    stop.set()
    assert not webhook.received


def test_a_config_error_is_not_retried_and_leaves_the_record(webhook, store, caplog):
    cfg = config(webhook)
    stop = threading.Event()
    box = Outbox(cfg, channels.CHANNELS, stop=lambda: stop, store=store, ref=REF)
    box.post(letter(cfg, target="bad"))
    wait_until(lambda: "not retried" in caplog.text)
    wait_until(lambda: not record(store))
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("fleetmedic")]
    assert ours and not [m for m in ours if "nosuchscheme" in m]  # never the URL (a secret)
    stop.set()


def test_tries_run_out_and_an_outage_is_logged_as_news_not_per_try(webhook, store, caplog):
    cfg = config(webhook, tries=3)
    stop = threading.Event()
    box = Outbox(cfg, channels.CHANNELS, stop=lambda: stop, store=store, ref=REF)
    webhook.failing = 100
    with caplog.at_level("INFO", logger="fleetmedic.controller.outbox"):
        box.post(letter(cfg))
        wait_until(lambda: "dropped after 3 tries" in caplog.text)
    stop.set()
    assert len(webhook.received) == 3
    warnings = [r for r in caplog.records if r.levelname == "WARNING" and "not sent" in r.message]
    assert len(warnings) == 1, [r.message for r in caplog.records]
    wait_until(lambda: not record(store))  # (taken off the record just after the log line)


def test_a_storm_email_through_a_relay_that_comes_back(webhook, smtp_sink, store):
    cfg = config(webhook, smtp=smtp_sink)
    port = smtp_sink.port
    smtp_sink.stop()  # the relay is down
    stop = threading.Event()
    box = Outbox(cfg, channels.CHANNELS, stop=lambda: stop, store=store, ref=REF)
    storm = notify.Storm(10, ["gpu-1", "gpu-2", "gpu-3"], 600, 20, "2026-11-27T03:00:00Z")
    box.post(channels.email(storm, id="email/storm/default/x", what="storm email"))
    wait_until(lambda: bool(record(store)))
    time.sleep(0.5)  # a try or two against the dead relay
    smtp_sink.port = port
    smtp_sink.start()
    [msg] = smtp_sink.wait_for(1)
    assert "circuit breaker open" in msg["Subject"]
    wait_until(lambda: not record(store))
    stop.set()


@pytest.mark.kube
def test_the_record_on_the_real_api_server(kube, webhook):
    """The same record on a real ConfigMap (merge patches that add and remove one key)."""
    cfg = config(webhook)
    namespace = f"outbox-{uuid.uuid4().hex[:6]}"
    kube.ensure_namespace(namespace)
    api = kube_adapter.connect(kube.kubeconfig)
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pause"}}
    api._call("create", "POST", f"/api/v1/namespaces/{namespace}/configmaps", body=body)
    api.patch_config_map_data(namespace, "pause", {"pause": "false"})
    ref = (namespace, "pause")
    stop = threading.Event()
    box = Outbox(cfg, channels.CHANNELS, stop=lambda: stop, store=api, ref=ref)
    webhook.failing = 2
    box.post(letter(cfg))
    wait_until(lambda: any(k.startswith(RECORD_PREFIX) for k in _data(api, ref)))
    webhook.wait_for(lambda r: r.answered == 200)
    wait_until(lambda: _data(api, ref) == {"pause": "false"})  # others' keys untouched
    stop.set()


def _data(api, ref):
    return (api.get_config_map(*ref) or {}).get("data") or {}


def test_a_channel_that_raises_a_bug_is_retried_not_fatal(store):
    calls = []

    def send(cfg, letter):
        calls.append(letter.id)
        if len(calls) == 1:
            raise RuntimeError("a plugin's bug")
        if len(calls) == 2:
            raise TemporaryError("down")
        return "ok"

    cfg = parse({})
    stop = threading.Event()
    box = Outbox(
        cfg, {"x": Channel(send, lambda c, lt: (0.1, 5))}, stop=lambda: stop, store=store, ref=REF
    )
    box.post(Letter("x/1", "x", "t", "test letter", {}))
    wait_until(lambda: len(calls) == 3)
    wait_until(lambda: not record(store))
    stop.set()
