"""Writes to the ledger: creating clusters and publishing messages (SPEC §1.1, §1.2).

Every write happens in one transaction under the cluster's row lock, which allocates sequences
and timestamps; delivery to the bus is handed over on commit.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction

from ledger.bus import bus
from ledger.models import Cluster, ClusterState, Message
from ledger.records import JSON, ClusterRecord, MessageRecord, event_of, replay_allowed
from ledger.selectors import cluster_record, message_record
from zeroshot_web.errors import Conflict, InvalidInput, NotFound, TooLarge

TOPIC_RE = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")
CLUSTER_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
MESSAGE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
IDEMPOTENCY_KEY_MAX = 200

STATE_BY_TOPIC = {"CLUSTER_COMPLETE": ClusterState.COMPLETED, "CLUSTER_FAILED": ClusterState.FAILED}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class MessageDraft:
    """A message as a publisher asks for it, before the ledger gives it a place."""

    topic: str
    sender: str
    receiver: str = "broadcast"
    content: dict[str, JSON] = field(default_factory=dict)
    metadata: JSON = None
    timestamp: int | None = None
    id: str | None = None
    idempotency_key: str | None = None

    def body_hash(self) -> str:
        """A digest of what the publisher asked for, to recognise an idempotent retry."""
        body = {
            "topic": self.topic,
            "sender": self.sender,
            "receiver": self.receiver,
            "content": self.content,
            "metadata": self.metadata,
            "timestamp": self.timestamp,
            "id": self.id,
        }
        encoded = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(encoded.encode()).hexdigest()


def _json_size(value: JSON) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def message_draft_check(draft: MessageDraft, *, index: int | None = None) -> None:
    """Check a draft against SPEC §1.1; raise ``InvalidInput`` or ``TooLarge`` naming the field."""

    def where(field_name: str) -> dict[str, Any]:
        return {"field": field_name} if index is None else {"index": index, "field": field_name}

    def prefix(field_name: str) -> str:
        return field_name if index is None else f"messages[{index}].{field_name}"

    if not isinstance(draft.topic, str) or not TOPIC_RE.match(draft.topic):
        raise InvalidInput(
            f"{prefix('topic')} must match ^[A-Z][A-Z0-9_]{{0,63}}$ (e.g. PLAN_READY), "
            f"got {draft.topic!r}",
            details=where("topic"),
        )
    if not isinstance(draft.sender, str) or not 1 <= len(draft.sender) <= 128:
        raise InvalidInput(f"{prefix('sender')} must be 1-128 characters", details=where("sender"))
    if not isinstance(draft.receiver, str) or not 1 <= len(draft.receiver) <= 128:
        raise InvalidInput(
            f"{prefix('receiver')} must be 1-128 characters", details=where("receiver")
        )
    if draft.id is not None and not MESSAGE_ID_RE.match(draft.id):
        raise InvalidInput(
            f"{prefix('id')} must be 1-128 letters, digits or _.:- characters",
            details=where("id"),
        )
    if draft.idempotency_key is not None and not 1 <= len(draft.idempotency_key) <= 200:
        raise InvalidInput(
            f"{prefix('idempotency_key')} must be 1-200 characters",
            details=where("idempotency_key"),
        )
    if draft.timestamp is not None and (
        isinstance(draft.timestamp, bool)
        or not isinstance(draft.timestamp, int)
        or draft.timestamp < 0
    ):
        raise InvalidInput(
            f"{prefix('timestamp')} must be a non-negative integer of milliseconds",
            details=where("timestamp"),
        )
    unknown = set(draft.content) - {"text", "data"}
    if unknown:
        raise InvalidInput(
            f"{prefix('content')} may only hold text and data, not {sorted(unknown)}",
            details=where("content"),
        )
    text = draft.content.get("text")
    if text is not None and not isinstance(text, str):
        raise InvalidInput(
            f"{prefix('content.text')} must be a string", details=where("content.text")
        )
    if isinstance(text, str) and len(text.encode()) > settings.LEDGER_MAX_TEXT_BYTES:
        raise TooLarge(
            f"{prefix('content.text')} is larger than {settings.LEDGER_MAX_TEXT_BYTES} bytes",
            details=where("content.text"),
        )
    if (
        "data" in draft.content
        and _json_size(draft.content["data"]) > settings.LEDGER_MAX_JSON_BYTES
    ):
        raise TooLarge(
            f"{prefix('content.data')} is larger than {settings.LEDGER_MAX_JSON_BYTES} bytes "
            "serialised",
            details=where("content.data"),
        )
    if _json_size(draft.metadata) > settings.LEDGER_MAX_JSON_BYTES:
        raise TooLarge(
            f"{prefix('metadata')} is larger than {settings.LEDGER_MAX_JSON_BYTES} bytes "
            "serialised",
            details=where("metadata"),
        )


def message_publish(*, cluster_id: str, draft: MessageDraft) -> MessageRecord:
    """Store one message and deliver it after commit; an idempotent retry returns the original."""
    return message_publish_batch(cluster_id=cluster_id, drafts=[draft], _single=True)[0]


def message_publish_batch(
    *, cluster_id: str, drafts: Sequence[MessageDraft], _single: bool = False
) -> list[MessageRecord]:
    """Store messages all or nothing, consecutive and 1 ms apart; deliver them after commit."""
    if not drafts:
        raise InvalidInput("a batch needs at least one message", details={"field": "messages"})
    if len(drafts) > settings.LEDGER_MAX_BATCH:
        raise TooLarge(
            f"a batch holds at most {settings.LEDGER_MAX_BATCH} messages, got {len(drafts)}",
            details={"field": "messages", "limit": settings.LEDGER_MAX_BATCH},
        )
    for index, draft in enumerate(drafts):
        message_draft_check(draft, index=None if _single else index)

    with bus.ordered_commit(cluster_id):
        try:
            with transaction.atomic():
                return _store(cluster_id=cluster_id, drafts=drafts)
        except IntegrityError as error:
            # Only a publisher-given id can collide: sequences are allocated under the lock.
            raise Conflict(
                "a message with this id already exists in the cluster",
                details={"reason": str(error)},
            ) from error


def _store(*, cluster_id: str, drafts: Sequence[MessageDraft]) -> list[MessageRecord]:
    cluster = Cluster.objects.select_for_update().filter(pk=cluster_id).first()
    if cluster is None:
        raise NotFound(f"cluster {cluster_id!r} does not exist", details={"cluster_id": cluster_id})

    hashes = [d.body_hash() if d.idempotency_key is not None else "" for d in drafts]
    keys = {d.idempotency_key for d in drafts if d.idempotency_key is not None}
    stored_by_key = (
        {
            m.idempotency_key: m
            for m in Message.objects.filter(cluster=cluster, idempotency_key__in=keys)
        }
        if keys
        else {}
    )

    results: list[MessageRecord | None] = [None] * len(drafts)
    fresh: list[tuple[int, MessageDraft, str]] = []
    seen_in_batch: dict[str, tuple[str, int]] = {}
    for index, (draft, body_hash) in enumerate(zip(drafts, hashes, strict=True)):
        key = draft.idempotency_key
        if key is None:
            fresh.append((index, draft, body_hash))
            continue
        previous = stored_by_key.get(key)
        if previous is not None:
            if previous.body_hash != body_hash:
                raise Conflict(
                    f"idempotency key {key!r} was already used with a different message",
                    details={"idempotency_key": key, "index": index},
                )
            results[index] = message_record(previous, cluster_id=cluster_id)
            continue
        if key in seen_in_batch:
            if seen_in_batch[key][0] != body_hash:
                raise Conflict(
                    f"idempotency key {key!r} appears twice in the batch with different messages",
                    details={"idempotency_key": key, "index": index},
                )
            continue  # filled in from the first occurrence below
        seen_in_batch[key] = (body_hash, index)
        fresh.append((index, draft, body_hash))

    if fresh:
        # Never earlier than any requested timestamp, never backwards, exactly 1 ms apart.
        base = max(
            now_ms(),
            cluster.last_timestamp + 1,
            *(
                d.timestamp - offset
                for offset, (_, d, _) in enumerate(fresh)
                if d.timestamp is not None
            ),
        )
        rows = [
            Message(
                cluster=cluster,
                message_id=draft.id or f"msg_{secrets.token_hex(16)}",
                sequence=cluster.last_sequence + offset + 1,
                timestamp=base + offset,
                topic=draft.topic,
                sender=draft.sender,
                receiver=draft.receiver,
                content=draft.content,
                metadata=draft.metadata,
                replayable=replay_allowed(
                    topic=draft.topic, content=draft.content, metadata=draft.metadata
                ),
                event=event_of(draft.content),
                idempotency_key=draft.idempotency_key,
                body_hash=body_hash,
            )
            for offset, (_, draft, body_hash) in enumerate(fresh)
        ]
        Message.objects.bulk_create(rows)
        cluster.last_sequence += len(rows)
        cluster.last_timestamp = rows[-1].timestamp
        update_fields = ["last_sequence", "last_timestamp"]
        for row in rows:
            if row.topic in STATE_BY_TOPIC:
                cluster.state = STATE_BY_TOPIC[row.topic]
                update_fields.append("state")
        cluster.save(update_fields=sorted(set(update_fields)))
        records = [message_record(row, cluster_id=cluster_id) for row in rows]
        for (index, _, _), record in zip(fresh, records, strict=True):
            results[index] = record
        bus.deliver_on_commit(records)

    # An in-batch repeat of a key stands for the message stored for its first occurrence.
    first_by_key = {key: results[index] for key, (_, index) in seen_in_batch.items()}
    final: list[MessageRecord] = []
    for draft, result in zip(drafts, results, strict=True):
        chosen = result if result is not None else first_by_key.get(draft.idempotency_key or "")
        assert chosen is not None
        final.append(chosen)
    return final


# A readable id like "emerald-prism-4", in our own words.
_ADJECTIVES = (
    "amber",
    "azure",
    "bold",
    "brisk",
    "calm",
    "cobalt",
    "coral",
    "crimson",
    "dusty",
    "eager",
    "fleet",
    "frosty",
    "gentle",
    "golden",
    "hidden",
    "ivory",
    "jade",
    "keen",
    "lunar",
    "mellow",
    "misty",
    "nimble",
    "olive",
    "quiet",
    "rapid",
    "rustic",
    "silent",
    "solar",
    "steady",
    "swift",
    "tidal",
    "velvet",
    "vivid",
    "wild",
    "woven",
    "zesty",
)
_NOUNS = (
    "anchor",
    "aurora",
    "beacon",
    "canyon",
    "cedar",
    "comet",
    "delta",
    "ember",
    "falcon",
    "fjord",
    "glacier",
    "harbor",
    "heron",
    "lantern",
    "maple",
    "meadow",
    "nebula",
    "orbit",
    "pebble",
    "prairie",
    "quartz",
    "reef",
    "ridge",
    "river",
    "sparrow",
    "summit",
    "thicket",
    "tundra",
    "valley",
    "willow",
    "zephyr",
)


def cluster_id_generate() -> str:
    """A fresh readable id such as ``amber-comet-17`` (not checked for uniqueness here)."""
    return f"{secrets.choice(_ADJECTIVES)}-{secrets.choice(_NOUNS)}-{secrets.randbelow(100)}"


def cluster_create(
    *,
    cluster_id: str | None = None,
    config: Mapping[str, JSON] | None = None,
    template: str = "",
    params: Mapping[str, JSON] | None = None,
    state: str = ClusterState.RUNNING,
    created_at: int | None = None,
) -> ClusterRecord:
    """Create a cluster; without an id, a readable one is generated."""
    if cluster_id is not None and not CLUSTER_ID_RE.match(cluster_id):
        raise InvalidInput(
            "cluster id must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$",
            details={"field": "id", "value": cluster_id},
        )
    if state not in ClusterState.values:
        raise InvalidInput(
            f"unknown cluster state {state!r}",
            details={"field": "state", "allowed": ClusterState.values},
        )
    if config is not None and not isinstance(config, Mapping):
        raise InvalidInput("config must be an object", details={"field": "config"})
    config_dict = dict(config or {})
    agents = config_dict.get("agents", [])
    if not isinstance(agents, list) or not all(isinstance(a, dict) for a in agents):
        raise InvalidInput(
            "config.agents must be a list of objects", details={"field": "config.agents"}
        )
    for _ in range(20):
        candidate = cluster_id or cluster_id_generate()
        try:
            with transaction.atomic():
                cluster = Cluster.objects.create(
                    id=candidate,
                    created_at=created_at if created_at is not None else now_ms(),
                    state=state,
                    config=config_dict,
                    template=template,
                    params=dict(params or {}),
                )
        except IntegrityError as error:
            if cluster_id is not None:
                raise Conflict(
                    f"cluster {cluster_id!r} already exists", details={"cluster_id": cluster_id}
                ) from error
            continue
        return cluster_record(cluster)
    raise Conflict("could not find a free cluster id; give one explicitly")


# Stored ids looked up per query when an import may repeat some.
_LOOKUP_CHUNK = 5000


@dataclass(frozen=True, slots=True)
class ImportedMessage:
    """A message from another ledger: its id and timestamp are kept as they are."""

    id: str
    timestamp: int
    topic: str
    sender: str
    receiver: str
    content: dict[str, JSON]
    metadata: JSON


def message_import_batch(
    *, cluster_id: str, messages: Sequence[ImportedMessage], assume_absent: bool = False
) -> list[MessageRecord]:
    """Append messages that keep their ids and timestamps; ids already present are skipped.

    Imports take the source's values as they are (SPEC §1.1): no topic or size checks, no
    timestamp adjustment. Sequences follow the order given. Returns the newly stored messages,
    delivered on commit as imported. ``assume_absent`` skips the look-up of stored ids, for a
    caller that filled the cluster from its start with ids that are unique (an import into a
    cluster it created); the unique constraint still refuses a duplicate (``Conflict``).
    """
    if not messages:
        return []
    with bus.ordered_commit(cluster_id), transaction.atomic():
        fresh, last_sequence = _import_store(
            cluster_id=cluster_id, messages=messages, assume_absent=assume_absent
        )
        records = [
            MessageRecord(
                id=m.id,
                cluster_id=cluster_id,
                sequence=sequence,
                timestamp=m.timestamp,
                topic=m.topic,
                sender=m.sender,
                receiver=m.receiver,
                content=m.content if isinstance(m.content, dict) else {},
                metadata=m.metadata,
            )
            for sequence, m in enumerate(fresh, start=last_sequence + 1)
        ]
        bus.deliver_on_commit(records, imported=True)
        return records


def message_import_backfill(
    *, cluster_id: str, messages: Sequence[ImportedMessage], assume_absent: bool = False
) -> list[ImportedMessage]:
    """``message_import_batch`` for history nobody follows yet: nothing is handed to the bus.

    For filling a cluster the caller has just created (a zeroshot import): no subscriber takes
    imported messages as events, and no live client could follow the cluster before it existed,
    so building and pushing a record per message would only slow a million-row import down;
    a client that connects meanwhile catches up from the ledger (SPEC §1.4). Returns the
    messages stored, in sequence order.
    """
    if not messages:
        return []
    with transaction.atomic():
        fresh, _ = _import_store(
            cluster_id=cluster_id, messages=messages, assume_absent=assume_absent
        )
    return fresh


def _import_store(
    *, cluster_id: str, messages: Sequence[ImportedMessage], assume_absent: bool
) -> tuple[list[ImportedMessage], int]:
    """Insert the messages whose ids are new, under the cluster's row lock.

    Returns them in sequence order with the cluster's last sequence before them.
    """
    cluster = Cluster.objects.select_for_update().filter(pk=cluster_id).first()
    if cluster is None:
        raise NotFound(f"cluster {cluster_id!r} does not exist", details={"cluster_id": cluster_id})
    present: set[str] = set()
    if not assume_absent and cluster.last_sequence > 0:
        ids = [m.id for m in messages]
        # In chunks well under SQLite's limit of 32,766 bound parameters per statement.
        for start in range(0, len(ids), _LOOKUP_CHUNK):
            present.update(
                Message.objects.filter(
                    cluster=cluster, message_id__in=ids[start : start + _LOOKUP_CHUNK]
                ).values_list("message_id", flat=True)
            )
    fresh: list[ImportedMessage] = []
    for message in messages:
        if message.id not in present:
            present.add(message.id)
            fresh.append(message)
    last_sequence = cluster.last_sequence
    if not fresh:
        return fresh, last_sequence
    try:
        _insert_messages(cluster_id=cluster.pk, after_sequence=last_sequence, messages=fresh)
    except IntegrityError as error:
        raise Conflict(
            "a message with this id already exists in the cluster",
            details={"reason": str(error)},
        ) from error
    cluster.last_sequence += len(fresh)
    cluster.last_timestamp = max(cluster.last_timestamp, max(m.timestamp for m in fresh))
    cluster.save(update_fields=["last_sequence", "last_timestamp"])
    return fresh, last_sequence


# The columns an import sets itself, in the order ``_insert_messages`` builds its rows.
_IMPORT_COLUMNS = (
    "cluster_id",
    "message_id",
    "sequence",
    "timestamp",
    "topic",
    "sender",
    "receiver",
    "content",
    "metadata",
    "replayable",
    "event",
)


def _insert_messages(
    *, cluster_id: str, after_sequence: int, messages: Sequence[ImportedMessage]
) -> None:
    """Insert imported messages with sequences from ``after_sequence + 1``, fast.

    ``bulk_create`` compiles every value into multi-row SQL (about 90 rows per statement on
    SQLite), which costs three times the database's own work on an import of a million rows,
    and a ``Message`` instance per row costs about as much as the INSERT itself. So: one
    prepared one-row INSERT run by ``executemany`` over plain tuples. Columns come from the
    model, so a field the import does not set is inserted too, with its default; JSON is
    adapted by the backend as ``JSONField`` would.
    """
    fields = {f.attname: f for f in Message._meta.concrete_fields if not f.primary_key}
    others = [f for name, f in fields.items() if name not in _IMPORT_COLUMNS]
    columns = [fields[name] for name in _IMPORT_COLUMNS] + others
    defaults = tuple(f.get_db_prep_save(f.get_default(), connection) for f in others)
    adapt_json = connection.ops.adapt_json_value
    quote = connection.ops.quote_name
    sql = (
        f"INSERT INTO {quote(Message._meta.db_table)} "
        f"({', '.join(quote(f.column) for f in columns)}) "
        f"VALUES ({', '.join(['%s'] * len(columns))})"
    )
    params = [
        (
            cluster_id,
            m.id,
            sequence,
            m.timestamp,
            m.topic,
            m.sender,
            m.receiver,
            adapt_json(m.content, None),
            None if m.metadata is None else adapt_json(m.metadata, None),
            replay_allowed(topic=m.topic, content=m.content, metadata=m.metadata),
            event_of(m.content),
            *defaults,
        )
        for sequence, m in enumerate(messages, start=after_sequence + 1)
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


def cluster_clock_advance(*, cluster_id: str, to: int) -> None:
    """Make the cluster's next message stamp later than ``to``.

    A recorded context build starts at ``max(now, newest + 1)``; the next build reads messages
    from that start + 1 ms (``last_agent_start``). Advancing the clock keeps a message published
    in the same millisecond as the build from falling between the two.
    """
    Cluster.objects.filter(pk=cluster_id, last_timestamp__lt=to).update(last_timestamp=to)


def cluster_lock(*, cluster_id: str) -> int:
    """Take the cluster's row lock for the rest of the transaction; return its last sequence.

    The lock publishers take (``_store``): a reader that holds it sees every message committed
    up to the returned sequence and no publisher can add one until the transaction ends.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("cluster_lock must be called inside transaction.atomic()")
    last = (
        Cluster.objects.select_for_update()
        .filter(pk=cluster_id)
        .values_list("last_sequence", flat=True)
        .first()
    )
    if last is None:
        raise NotFound(f"cluster {cluster_id!r} does not exist", details={"cluster_id": cluster_id})
    return last
