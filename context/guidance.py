"""The guidance mailbox's prompt section: zeroshot's ``## Guidance (Queued)``, byte for byte.

SPEC §7.8. An operator's ``USER_GUIDANCE_AGENT`` (``receiver`` = the agent) and
``USER_GUIDANCE_CLUSTER`` (every agent) messages wait in each agent's mailbox until a prompt of
that agent carries them. The text follows zeroshot's ``src/agent/guidance-queue.ts``
(``formatGuidanceMessage``, ``formatGuidanceBlock``). Pure: the reads are in
``context.services.builds``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from context.jsformat import data_is_written, iso_ms, js_json
from ledger.records import MessageRecord
from ledger.topics import Topic

__all__ = [
    "GUIDANCE_BLOCK_END",
    "GUIDANCE_BLOCK_START",
    "GUIDANCE_PACK",
    "GUIDANCE_PER_BUILD",
    "GUIDANCE_TOPICS",
    "guidance_block",
    "guidance_for",
]

GUIDANCE_BLOCK_START: Final = "<<GUIDANCE_QUEUE_START>>"
GUIDANCE_BLOCK_END: Final = "<<GUIDANCE_QUEUE_END>>"
GUIDANCE_TOPICS: Final = (Topic.USER_GUIDANCE_CLUSTER, Topic.USER_GUIDANCE_AGENT)
# The pack's id and section, zeroshot's (src/agent/agent-context-packs.ts).
GUIDANCE_PACK: Final = "queuedGuidance"
# At most this many queued messages go into one prompt, oldest first; the rest wait for the
# next one (never dropped). With the API's 8,000-char bound that is at most ~128,000 chars.
GUIDANCE_PER_BUILD: Final = 16

# What JavaScript's String.prototype.trimEnd removes (ECMAScript WhiteSpace and
# LineTerminator). Python's str.rstrip() differs: it strips U+001C-U+001F and U+0085, which
# JavaScript keeps, and keeps U+FEFF, which JavaScript strips.
_JS_WHITESPACE: Final = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def guidance_for(message: MessageRecord, agent_id: str) -> bool:
    """Whether ``message`` is guidance in ``agent_id``'s mailbox (zeroshot's
    ``queryGuidanceMailbox``: every cluster guidance, and agent guidance addressed to it)."""
    if message.topic == Topic.USER_GUIDANCE_CLUSTER:
        return True
    return message.topic == Topic.USER_GUIDANCE_AGENT and message.receiver == agent_id


def _message_text(message: MessageRecord) -> str:
    # guidance-queue.ts formatGuidanceMessage: "[iso] sender (TOPIC -> receiver)", the text,
    # the data as JSON.stringify(data, null, 2), then trimEnd().
    sender = message.sender or "unknown"
    topic = message.topic or "GUIDANCE"
    target = f" -> {message.receiver}" if message.receiver else ""
    text = f"[{iso_ms(message.timestamp)}] {sender} ({topic}{target})\n"
    if message.text:
        text += f"{message.text}\n"
    if data_is_written(message.data):
        text += f"{js_json(message.data)}\n"
    return text.rstrip(_JS_WHITESPACE)


def guidance_block(messages: Sequence[MessageRecord]) -> str:
    """The ``## Guidance (Queued)`` section for ``messages`` in sequence order; "" for none.

    guidance-queue.ts formatGuidanceBlock: the heading, the start marker, each message followed
    by a newline and a blank line between two, then a blank line, the end marker and a blank
    line.
    """
    if not messages:
        return ""
    ordered = sorted(messages, key=lambda m: m.sequence)
    body = "\n".join(f"{_message_text(m)}\n" for m in ordered)
    return f"## Guidance (Queued)\n\n{GUIDANCE_BLOCK_START}\n{body}\n{GUIDANCE_BLOCK_END}\n\n"
