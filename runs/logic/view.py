"""The ledger as logic scripts see it: a bounded, ordered view of one cluster's messages.

``ledger.query``, ``findLast``, ``count`` and ``since`` inside a script are served from this view,
never from the database (SPEC §7.2). It holds the newest messages of the cluster, oldest first,
``AGENT_OUTPUT`` included as zeroshot's ledger has it, and keeps at most ``VIEW_MAX_MESSAGES`` of
them and at most ``VIEW_MAX_BYTES`` of their JSON text: past either bound the oldest are dropped.
``AGENT_OUTPUT`` has a bound of its own within those (``OUTPUT_MAX_MESSAGES``,
``OUTPUT_MAX_BYTES``; past it the oldest output goes first), so that an agent printing lines
never pushes the cluster's other messages out of its scripts' sight (docs/decisions/0131).
The server keeps one per cluster, appends each message as the pipeline offers it, and asks for
the view ``as_of`` a sequence when it has read further ahead.
"""

from __future__ import annotations

import bisect
import itertools
import json
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from ledger.topics import Topic
from runs.logic.records import JSON

VIEW_MAX_MESSAGES: Final = 10_000
VIEW_MAX_BYTES: Final = 16 * 1024 * 1024

# Raw output lines are in the view (zeroshot's ledger has them), within a bound of their own.
OUTPUT_TOPIC: Final = Topic.AGENT_OUTPUT
OUTPUT_MAX_MESSAGES: Final = 1_000
OUTPUT_MAX_BYTES: Final = 4 * 1024 * 1024

# Names every payload ever built in this process, so a sandbox worker can tell it already has one.
_PAYLOAD_KEYS: Final = itertools.count(1)


def script_message(message: Mapping[str, JSON]) -> dict[str, JSON]:
    """A message in the shape scripts read: SPEC §1.1, with a numeric ``sequence``.

    ``content`` is always an object (``{}`` when the message has neither text nor data), so that
    ``message.content.data`` is ``undefined`` rather than a ``TypeError``; ``receiver`` defaults to
    ``broadcast``. The sequence is a number because scripts compare it; it stays exact up to 2⁵³.
    """
    content = message.get("content")
    return {
        "id": str(message["id"]),
        "sequence": int(message["sequence"]),
        "timestamp": int(message["timestamp"]),
        "cluster_id": message.get("cluster_id"),
        "topic": str(message["topic"]),
        "sender": str(message["sender"]),
        "receiver": str(message.get("receiver") or "broadcast"),
        "content": dict(content) if isinstance(content, Mapping) else {},
        "metadata": message.get("metadata"),
    }


@dataclass(frozen=True, slots=True)
class _Entry:
    sequence: int
    timestamp: int
    topic: str
    sender: str
    receiver: str
    # ASCII-only JSON (non-ASCII escaped), so that its length is also its length in JavaScript.
    text: str


@dataclass(frozen=True, slots=True)
class ViewPayload:
    """What a script evaluation hands the engine: column index (JSON) and the messages' text."""

    index_json: str
    blob: str
    key: int = field(default_factory=lambda: next(_PAYLOAD_KEYS))


class LedgerView:
    """The newest messages of one cluster, oldest first, within the bounds.

    Not thread-safe: one pipeline worker owns it. ``payload()`` returns immutable strings, which
    an evaluation may use on another thread.
    """

    def __init__(
        self,
        messages: Iterable[Mapping[str, JSON]] = (),
        *,
        max_messages: int = VIEW_MAX_MESSAGES,
        max_bytes: int = VIEW_MAX_BYTES,
        max_output_messages: int = OUTPUT_MAX_MESSAGES,
        max_output_bytes: int = OUTPUT_MAX_BYTES,
    ) -> None:
        if min(max_messages, max_bytes, max_output_messages, max_output_bytes) < 1:
            raise ValueError("a ledger view needs room for at least one message")
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.max_output_messages = max_output_messages
        self.max_output_bytes = max_output_bytes
        self._entries: list[_Entry] = []
        self._bytes = 0
        # The AGENT_OUTPUT entries held (their sequences, oldest first) and their bytes.
        self._outputs: deque[int] = deque()
        self._output_bytes = 0
        self._payload: ViewPayload | None = None
        self.extend(messages)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def last_sequence(self) -> int | None:
        """The sequence of the newest message held, or ``None`` when the view is empty."""
        return self._entries[-1].sequence if self._entries else None

    @property
    def size_bytes(self) -> int:
        """The length of the JSON text of the messages held."""
        return self._bytes

    @property
    def messages(self) -> list[dict[str, JSON]]:
        """The messages held, oldest first, in the shape scripts read."""
        return [json.loads(entry.text) for entry in self._entries]

    def get(self, sequence: int) -> dict[str, JSON] | None:
        """The message held at ``sequence``, in the shape scripts read; None when not held."""
        at = bisect.bisect_left(self._entries, sequence, key=lambda entry: entry.sequence)
        if at < len(self._entries) and self._entries[at].sequence == sequence:
            loaded: dict[str, JSON] = json.loads(self._entries[at].text)
            return loaded
        return None

    def append(self, message: Mapping[str, JSON]) -> None:
        """Add the next message of the cluster.

        Sequences must increase: the view is the cluster as of its newest message.
        """
        shaped = script_message(message)
        last = self.last_sequence
        if last is not None and shaped["sequence"] <= last:
            raise ValueError(
                f"sequence {shaped['sequence']} does not follow the view's last sequence {last}"
            )
        self._add(
            _Entry(
                sequence=shaped["sequence"],
                timestamp=shaped["timestamp"],
                topic=shaped["topic"],
                sender=shaped["sender"],
                receiver=shaped["receiver"],
                text=json.dumps(shaped, separators=(",", ":"), ensure_ascii=True),
            )
        )

    def extend(self, messages: Iterable[Mapping[str, JSON]]) -> None:
        """Append several messages in order."""
        for message in messages:
            self.append(message)

    def as_of(self, sequence: int) -> LedgerView:
        """A copy holding only the messages up to and including ``sequence``."""
        end = bisect.bisect_right(self._entries, sequence, key=lambda entry: entry.sequence)
        view = LedgerView(
            max_messages=self.max_messages,
            max_bytes=self.max_bytes,
            max_output_messages=self.max_output_messages,
            max_output_bytes=self.max_output_bytes,
        )
        # A prefix of a view within its bounds is within them too.
        view._entries = self._entries[:end]
        view._bytes = sum(len(entry.text) for entry in view._entries)
        outputs = [e for e in view._entries if e.topic == OUTPUT_TOPIC]
        view._outputs = deque(e.sequence for e in outputs)
        view._output_bytes = sum(len(e.text) for e in outputs)
        return view

    def payload(self) -> ViewPayload:
        """The view as the script prelude reads it; built once per state of the view."""
        if self._payload is None:
            self._payload = _payload_of(self._entries)
        return self._payload

    def _add(self, entry: _Entry) -> None:
        self._entries.append(entry)
        self._bytes += len(entry.text)
        self._payload = None
        if entry.topic == OUTPUT_TOPIC:
            self._outputs.append(entry.sequence)
            self._output_bytes += len(entry.text)
            self._drop_outputs()
        drop = 0
        # Keep the newest message even when it alone passes the byte bound.
        while len(self._entries) - drop > 1 and (
            len(self._entries) - drop > self.max_messages or self._bytes > self.max_bytes
        ):
            self._bytes -= len(self._entries[drop].text)
            drop += 1
        if drop:
            for gone in self._entries[:drop]:
                if gone.topic == OUTPUT_TOPIC:
                    self._outputs.popleft()
                    self._output_bytes -= len(gone.text)
            del self._entries[:drop]

    def _drop_outputs(self) -> None:
        """Past the output bound, drop the oldest ``AGENT_OUTPUT`` (the newest one stays)."""
        while len(self._outputs) > 1 and (
            len(self._outputs) > self.max_output_messages
            or self._output_bytes > self.max_output_bytes
        ):
            sequence = self._outputs.popleft()
            at = bisect.bisect_left(self._entries, sequence, key=lambda entry: entry.sequence)
            gone = self._entries.pop(at)
            self._bytes -= len(gone.text)
            self._output_bytes -= len(gone.text)


def _payload_of(entries: list[_Entry]) -> ViewPayload:
    names: dict[str, int] = {}

    def code(name: str) -> int:
        return names.setdefault(name, len(names))

    starts = [0]
    topics: dict[str, list[int]] = {}
    for position, entry in enumerate(entries):
        starts.append(starts[-1] + len(entry.text))
        topics.setdefault(entry.topic, []).append(position)
    columns = {
        "sender": [code(e.sender) for e in entries],
        "receiver": [code(e.receiver) for e in entries],
        "timestamp": [e.timestamp for e in entries],
        "start": starts,
        "topics": topics,
    }
    index = {"names": list(names), **columns}
    return ViewPayload(
        index_json=json.dumps(index, separators=(",", ":"), ensure_ascii=True),
        blob="".join(entry.text for entry in entries),
    )
