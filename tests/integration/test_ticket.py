"""The RMA ticket webhook against a real HTTP receiver (tests/harness/webhook.py): the JSON
case per template, the idempotency key, retries of a dead receiver, a refused body, and
the sender (controller/ticketer.py) that posts each case to the outbox (its record on the
file store's pause ConfigMap) and writes its end on the Node: sent once, retried while the
receiver is down, taken from the record after a restart, never twice (the tombstone), a
refusal and the last try recorded as failed."""

from __future__ import annotations

import copy
import json
import threading
import time

import pytest

from fleetmedic.adapters import ticket
from fleetmedic.adapters.filestore import FileStore
from fleetmedic.controller import channels
from fleetmedic.controller.outbox import Outbox
from fleetmedic.controller.ticketer import Ticketer
from fleetmedic.errors import ConfigError, TemporaryError
from fleetmedic.model import keys
from fleetmedic.model.config import TicketConfig, parse
from fleetmedic.model.nodestate import view
from fleetmedic.model.vocabulary import preset
from fleetmedic.policy.rmaflow import RmaRecord
from tests.unit.policy.policysim import T0

CASE = {
    "kind": "fleetmedic.io/rma-case/v1",
    "case_id": "e3-20261121T120000Z-1652000000101",
    "recommendation": "RMA candidate: GPU 1652000000101",
    "summary": "RMA candidate: GPU 1652000000101 (GPU 1, bus-loss: 3 episodes, no repair held 7d)",
    "node": {"name": "gpu-2", "address": "10.0.0.2", "vendor": "nvidia"},
    "gpu": {"serial": "1652000000101", "uuid": "GPU-1", "index": 1, "pci": "0000:28:00.0"},
    "rule": {"family": "bus-loss", "episodes": 3, "why": "Xid 79 recurs"},
    "history": [
        {"at": "2026-11-19T12:00:00Z", "node": "gpu-9", "ep": 1, "fam": "bus-loss", "why": "lost"},
        {"at": "2026-11-21T12:00:00Z", "node": "gpu-2", "ep": 3, "fam": "bus-loss", "why": "lost"},
    ],
    "evidence": {"host": "bastion", "bundles": ["/var/lib/fleetmedic/evidence/gpu-2/x.tar.gz"]},
}


def target(hook, **kw) -> TicketConfig:
    return TicketConfig(url=hook.http_url("rest/api/2/issue"), timeout=5, **kw)


def test_the_generic_case_is_posted_as_is_with_its_idempotency_key(webhook):
    webhook.reply = {"id": "10042", "key": "OPS-17"}
    assert ticket.send(target(webhook), CASE) == "OPS-17"
    [got] = webhook.received
    assert got.path == "/rest/api/2/issue" and got.body == CASE
    assert got.headers["Idempotency-Key"] == CASE["case_id"]
    assert got.headers["Content-Type"] == "application/json"


@pytest.mark.parametrize(
    ("template", "fields", "check"),
    [
        (
            "jira",
            {"project": "OPS", "issuetype": "Task", "labels": "gpu,h100"},
            lambda b: (
                b["fields"]["project"] == {"key": "OPS"}
                and b["fields"]["issuetype"] == {"name": "Task"}
                and b["fields"]["summary"] == "gpu-2: RMA candidate: GPU 1652000000101"
                and b["fields"]["labels"] == ["fleetmedic", "rma", "gpu", "h100"]
                and "gpu-9 episode 1" in b["fields"]["description"]
            ),
        ),
        (
            "servicenow",
            {"assignment_group": "hw-ops"},
            lambda b: (
                b["short_description"] == "gpu-2: RMA candidate: GPU 1652000000101"
                and b["assignment_group"] == "hw-ops"
                and b["category"] == "hardware"
                and b["correlation_id"] == CASE["case_id"]
                and "1652000000101" in b["description"]
            ),
        ),
    ],
)
def test_built_in_templates_shape_the_trackers_create_bodies(webhook, template, fields, check):
    ticket.send(target(webhook, template=template, fields=fields), CASE)
    [got] = webhook.received
    assert check(got.body), got.body


def test_a_site_template_renders_json_or_is_refused_before_any_post(webhook, tmp_path):
    own = tmp_path / "intake.json.j2"
    own.write_text('{"serial": {{ case.gpu.serial | tojson }}, "acct": {{ fields.acct | tojson }}}')
    ticket.send(target(webhook, template="file", template_file=own, fields={"acct": "A-1"}), CASE)
    assert webhook.received[-1].body == {"serial": "1652000000101", "acct": "A-1"}
    own.write_text("{{ case.gpu.serial }} is not JSON")
    with pytest.raises(ConfigError, match="did not render JSON"):
        ticket.send(target(webhook, template="file", template_file=own), CASE)
    assert len(webhook.received) == 1, "nothing posted"


def test_a_dead_receiver_is_tried_again_and_a_refusal_is_not(webhook, tmp_path):
    webhook.failing = 1
    with pytest.raises(TemporaryError, match="HTTP 503"):
        ticket.send(target(webhook), CASE)
    webhook.refusing = 1
    with pytest.raises(ticket.Refused, match="HTTP 400"):
        ticket.send(target(webhook), CASE)
    secret = tmp_path / "url"
    secret.write_text("http://127.0.0.1:9/hooks/s3cr3t-token\n")
    with pytest.raises(TemporaryError) as err:
        ticket.send(TicketConfig(url_file=secret, timeout=2), CASE)
    assert "s3cr3t" not in str(err.value), "the URL is the secret: never in a message"


def test_headers_come_from_a_file_and_bad_lines_are_named(webhook, tmp_path):
    h = tmp_path / "headers"
    h.write_text("# the tracker's token\nAuthorization: Bearer abc\n")
    ticket.send(target(webhook, headers_file=h), CASE)
    assert webhook.received[-1].headers["Authorization"] == "Bearer abc"
    h.write_text("Authorization Bearer abc\n")
    with pytest.raises(ConfigError, match="line 1: not `Name: value`"):
        ticket.send(target(webhook, headers_file=h), CASE)


# -- the sender, its state on the Node -------------------------------------------------------
class Nodes:
    """Node dicts written the way the Recorder writes them (Update.apply, preconditions)."""

    def __init__(self, cfg):
        self.cfg, self.vocab, self.nodes = cfg, cfg.vocabulary(), {}

    def add(self, name, record: RmaRecord, escalated=True):
        ann = {keys.ANN_RMA: record.encode()}
        if escalated:
            ann[keys.ANN_ESCALATED] = json.dumps({"ep": record.ep, "decided": record.at})
        self.nodes[name] = {"metadata": {"name": name, "annotations": ann}, "spec": {}}

    def write(self, upd):
        node = copy.deepcopy(self.nodes[upd.node])
        upd.apply(node, self.vocab)
        self.nodes[upd.node] = node

    def views(self):
        return [view(n, preset()) for n in self.nodes.values()]

    def rma(self, name) -> RmaRecord:
        return RmaRecord.decode(self.nodes[name]["metadata"]["annotations"][keys.ANN_RMA])


def record(tmp_path) -> RmaRecord:
    case = tmp_path / "gpu-2-e3-rma-1652000000101.json"
    case.write_text(json.dumps(CASE))
    gpu = {"serial": "1652000000101", "uid": "GPU-1", "index": 1, "family": "bus-loss", "count": 3}
    return RmaRecord(3, "2026-11-21T12:00:00Z", CASE["summary"], (gpu,), cases=(str(case),))


REF = ("fleetmedic", "fleetmedic-pause")


@pytest.fixture
def store(tmp_path):
    """The pause ConfigMap of the file store a Slurm fleet uses: the outbox's record."""
    s = FileStore(tmp_path / "store")
    s.ensure_config_map(*REF)
    return s


class Sender:
    """A controller's ticket parts: the outbox (its own thread, its record on ``store``)
    and the Ticketer that posts to it and writes the Node. ``stop()``: killed."""

    def __init__(self, webhook, nodes, store, retry=60.0, tries=3):
        self.cfg = parse(
            {"ticket": {"url": webhook.http_url("t"), "retry_interval": retry, "tries": tries}}
        )
        nodes.cfg = self.cfg
        self.stopped = threading.Event()
        self.outbox = Outbox(
            self.cfg, channels.CHANNELS, stop=lambda: self.stopped, store=store, ref=REF
        )
        self.outbox.start()  # as the loop does: start its parts, then restore them
        self.outbox.restore()
        self.ticketer = Ticketer(self.cfg, nodes.write, lambda fn: fn(), self.outbox, lambda: T0)
        self.nodes = nodes

    def due(self):
        return self.ticketer.due(self.nodes.views(), T0)

    def ended(self, timeout=20.0):
        """Wait until a posted letter ends and the Ticketer writes its end: the nodes."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            written = self.due()
            if written:
                return written
            time.sleep(0.05)
        raise AssertionError("no ticket ended in time")

    def stop(self):
        self.stopped.set()


def test_a_pending_case_is_sent_once_and_marked_sent(webhook, tmp_path, store):
    nodes = Nodes(parse({}))
    nodes.add("gpu-2", record(tmp_path))
    nodes.add("gpu-3", record(tmp_path), escalated=False)  # its email not decided yet
    webhook.reply = {"key": "OPS-17"}
    t = Sender(webhook, nodes, store)
    assert t.due() == [], "posted to the outbox; its end is written when it is heard"
    assert t.ended() == ["gpu-2"]
    [got] = webhook.received
    assert got.body == CASE, "the case file, as written"
    assert got.headers["Idempotency-Key"] == CASE["case_id"]
    rec = nodes.rma("gpu-2")
    assert (rec.ticket, rec.ticket_id) == ("sent", "1652000000101=OPS-17")
    assert nodes.rma("gpu-3").ticket == "pending"
    assert t.due() == []
    t.stop()
    # killed before the Node said sent: the next controller reads the outbox's tombstone
    nodes.add("gpu-2", record(tmp_path))
    again = Sender(webhook, nodes, store)
    assert again.due() == ["gpu-2"]
    rec = nodes.rma("gpu-2")
    assert (rec.ticket, rec.ticket_id) == ("sent", "1652000000101=OPS-17"), "the key too"
    time.sleep(0.5)
    assert len(webhook.received) == 1, "never sent twice"
    again.stop()


def test_a_dead_receiver_is_retried_and_a_restart_sends_what_was_pending(webhook, tmp_path, store):
    nodes = Nodes(parse({}))
    nodes.add("gpu-2", record(tmp_path))
    webhook.failing = 10_000
    t = Sender(webhook, nodes, store, retry=0.2, tries=100)
    t.due()
    webhook.wait_for(lambda r: r.answered == 503, ok_only=False)
    assert [k for k in store.get_config_map(*REF)["data"] if k.startswith("outbox.")], (
        "the letter is on the record while the receiver is down"
    )
    assert nodes.rma("gpu-2").ticket == "pending"
    t.stop()  # killed; the receiver comes back; the next controller takes the record
    time.sleep(0.3)
    webhook.failing = 0
    restarted = Sender(webhook, nodes, store, retry=0.2, tries=100)
    assert restarted.ended() == ["gpu-2"]
    assert nodes.rma("gpu-2").ticket == "sent"
    answers = [r.answered for r in webhook.received]
    assert answers.count(200) == 1 and set(answers) == {503, 200}, answers
    restarted.stop()


def test_a_refused_case_is_recorded_failed_and_not_retried(webhook, tmp_path, store):
    nodes = Nodes(parse({}))
    nodes.add("gpu-2", record(tmp_path))
    webhook.refusing = 1
    t = Sender(webhook, nodes, store, retry=0.2)
    t.due()
    assert t.ended() == ["gpu-2"]
    rec = nodes.rma("gpu-2")
    assert rec.ticket == "failed" and "HTTP 400" in rec.ticket_error
    time.sleep(0.5)
    assert t.due() == [] and len(webhook.received) == 1
    t.stop()


def test_the_last_try_is_recorded_failed(webhook, tmp_path, store):
    nodes = Nodes(parse({}))
    nodes.add("gpu-2", record(tmp_path))
    webhook.failing = 10_000
    t = Sender(webhook, nodes, store, retry=0.2, tries=2)
    t.due()
    assert t.ended() == ["gpu-2"]
    rec = nodes.rma("gpu-2")
    assert rec.ticket == "failed" and "given up after 2 tries" in rec.ticket_error
    assert [r.answered for r in webhook.received] == [503, 503]
    t.stop()
    # killed after the outbox gave up, before the Node said so: the next controller reads
    # why from the outbox's tombstone, and tries no more
    nodes.add("gpu-2", record(tmp_path))
    again = Sender(webhook, nodes, store, retry=0.2, tries=2)
    assert again.due() == ["gpu-2"]
    rec = nodes.rma("gpu-2")
    assert rec.ticket == "failed" and "given up after 2 tries" in rec.ticket_error
    time.sleep(0.6)  # three retry intervals: a letter posted again would have gone by now
    assert [r.answered for r in webhook.received] == [503, 503]
    again.stop()
