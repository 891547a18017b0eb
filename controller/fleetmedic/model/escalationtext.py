"""How an escalation's first line is shaped, for every channel: the email subject, the chat
title, the Event (policy/escalation.py says what goes in it). Pure text.

A mail client shows about 78 characters of a subject; :func:`subject` keeps the node, the
verdict and the start of the finding within them, and shortens the rest.
"""

from __future__ import annotations

SUBJECT_LIMIT = 78
"""Characters of a subject line a mail client shows (RFC 5322's recommended line length)."""
NOISE = (
    "restore: no GPU partitions before the repair; left alone",
    "restore: no partition layout recorded before the repair; nothing to restore",
)
"""Notes that say a phase had nothing to do: kept in the record, not shown first."""


def subject(node: str, said: str, verdict: str = "needs hands", cluster: str = "") -> str:
    """``<node> [on <cluster>] needs hands: <said>``, shortened to :data:`SUBJECT_LIMIT`:
    first the rungs become a count, then the finding is cut (never the node or verdict)."""
    head = f"{node}{f' on {cluster}' if cluster else ''} {verdict}: "
    text = head + said
    if len(text) <= SUBJECT_LIMIT:
        return text
    what, _, done = said.partition("; ")
    if done:
        n = done.count(",") + 1
        short = f"{what}; {n} rung{'s' if n > 1 else ''} failed"
        if len(head) + len(short) <= SUBJECT_LIMIT:
            return head + short
        room = SUBJECT_LIMIT - len(head) - len(f"; {n} failed") - 1
        if room >= 20:
            return head + what[:room].rstrip() + "…" + f"; {n} failed"
    return (head + what)[: SUBJECT_LIMIT - 1].rstrip() + "…"


def shown_message(message: str, failed_phase: str | None = None) -> str:
    """An attempt's message without the notes that only say a phase had nothing to do
    (policy/partition.py's skip notes), kept when the attempt failed in that very phase."""
    out = message
    for note in NOISE:
        if failed_phase is not None and note.startswith(f"{failed_phase}:"):
            continue
        out = out.replace(f"{note}; ", "").replace(f"; {note}", "").replace(note, "")
    return out.strip()
