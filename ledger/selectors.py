"""Reads from the ledger (SPEC §1.3). Every query is bounded and served by an index."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from django.db.models import Exists, F, OuterRef, Q, QuerySet, Subquery

from ledger import statements
from ledger.errors import InvalidInput, NotFound
from ledger.filters import DEFAULT_PAGE, MAX_PAGE, MessageFilter, filter_check
from ledger.labels import labels_stored
from ledger.models import Cluster, Message
from ledger.records import ClusterRecord, MessageRecord, PipelineLag, SearchHit
from ledger.search import search_narrow
from ledger.topics import Topic
from ledger.validation import INT64_MAX, integer_check, text_problem

NO_FILTER = MessageFilter()
# Cluster ids one query of ``clusters_holding_topic`` binds: below any database's limit.
CLUSTERS_PER_QUERY = 500
Order = Literal["asc", "desc"]


def message_record(message: Message, *, cluster_id: str | None = None) -> MessageRecord:
    """Detach a stored message from the ORM."""
    return MessageRecord(
        id=message.message_id,
        cluster_id=cluster_id or message.cluster_id,
        sequence=message.sequence,
        timestamp=message.timestamp,
        topic=message.topic,
        sender=message.sender,
        receiver=message.receiver,
        content=message.content if isinstance(message.content, dict) else {},
        metadata=message.metadata,
    )


def cluster_record(cluster: Cluster) -> ClusterRecord:
    """Detach a cluster from the ORM; ``_clusters()`` rows carry their last message's time."""
    # The cluster's clock (last_timestamp) also moves for recorded context builds; activity is
    # what the ledger shows, its newest message.
    last_message_at = getattr(cluster, "last_message_at", cluster.last_timestamp)
    return ClusterRecord(
        id=cluster.id,
        created_at=cluster.created_at,
        state=cluster.state,
        config=cluster.config if isinstance(cluster.config, dict) else {},
        template=cluster.template or None,
        params=cluster.params if isinstance(cluster.params, dict) else {},
        message_count=cluster.last_sequence,
        last_sequence=cluster.last_sequence,
        last_activity=last_message_at or None,
        labels=labels_stored(cluster.labels),
        config_version=getattr(cluster, "config_version", 1) or 1,
    )


def storable(value: object) -> bool:
    """Whether a string could be stored at all; one that cannot names nothing that exists, and
    PostgreSQL would refuse to even compare it (NUL)."""
    return isinstance(value, str) and text_problem(value) is None


def _clusters() -> QuerySet[Cluster]:
    """Clusters with the timestamp of their newest message: one seek on ``msg_cluster_time``
    per cluster, inside the same query."""
    newest = Message.objects.filter(cluster_id=OuterRef("pk")).order_by("-timestamp", "-sequence")
    return Cluster.objects.annotate(last_message_at=Subquery(newest.values("timestamp")[:1]))


def cluster_get(*, cluster_id: str) -> ClusterRecord:
    """One cluster, or ``NotFound`` (one prebuilt statement: every build starts here)."""
    cluster = statements.cluster_row(cluster_id=cluster_id) if storable(cluster_id) else None
    if cluster is None:
        raise NotFound(f"cluster {cluster_id!r} does not exist", details={"cluster_id": cluster_id})
    return cluster


def cluster_exists(*, cluster_id: str) -> bool:
    """Whether a cluster with this id exists (one prebuilt primary-key seek)."""
    return storable(cluster_id) and statements.cluster_found(cluster_id=cluster_id)


def cluster_list(
    *,
    search: str = "",
    state: str = "",
    only_id: str | None = None,
    limit: int = 200,
) -> list[ClusterRecord]:
    """Clusters, newest first, optionally filtered by id substring and state (one query)."""
    clusters = _clusters()
    if only_id is not None:
        clusters = clusters.filter(pk=only_id)
    if search:
        if not storable(search):
            return []
        clusters = clusters.filter(id__icontains=search)
    if state:
        clusters = clusters.filter(state=state)
    return [cluster_record(c) for c in clusters.order_by("-created_at", "id")[:limit]]


def _messages(*, cluster_id: str, where: MessageFilter) -> QuerySet[Message]:
    """The messages of one cluster that pass a filter (SPEC §1.3), but for its search words:
    those also decide the order, so ``_in_order`` applies them."""
    filter_check(where)
    messages = Message.objects.filter(cluster_id=cluster_id)
    if isinstance(where.topic, str):
        messages = messages.filter(topic=where.topic)
    elif where.topic is not None:
        messages = messages.filter(topic__in=list(where.topic))
    if where.sender is not None:
        messages = messages.filter(sender=where.sender)
    if where.receiver is not None:
        messages = messages.filter(receiver=where.receiver)
    if where.replayable_only:
        messages = messages.filter(replayable=True)
    if where.since is not None:
        messages = messages.filter(timestamp__gte=where.since)
    if where.until is not None:
        messages = messages.filter(timestamp__lte=where.until)
    if where.after is not None:
        messages = messages.filter(sequence__gt=where.after)
    if where.up_to_sequence is not None:
        messages = messages.filter(sequence__lte=where.up_to_sequence)
    return messages


def _in_order(
    messages: QuerySet[Message],
    *,
    cluster_id: str,
    newest_first: bool,
    limit: int | None,
    where: MessageFilter = NO_FILTER,
) -> list[MessageRecord]:
    """Records in (timestamp, sequence) order, newest first when asked, at most ``limit``.

    A search (``where.q``) keeps only the messages holding its words, in sequence order: the
    order its index can be read in (``ledger.search``).
    """
    terms = where.search_terms
    if terms:
        messages = search_narrow(
            messages, terms=terms, cluster_id=cluster_id, newest_first=newest_first
        )
    else:
        ordering = ("-timestamp", "-sequence") if newest_first else ("timestamp", "sequence")
        messages = messages.order_by(*ordering)
    if limit is not None:
        messages = messages[:limit]
    return [message_record(m, cluster_id=cluster_id) for m in messages]


def message_query(
    *,
    cluster_id: str,
    where: MessageFilter = NO_FILTER,
    limit: int | None = DEFAULT_PAGE,
    order: Order = "asc",
) -> list[MessageRecord]:
    """Messages of one cluster ordered by (timestamp, sequence), filtered as SPEC §1.3 says."""
    if order not in ("asc", "desc"):
        raise InvalidInput("order must be asc or desc", details={"field": "order", "value": order})
    if limit is not None and not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(
            f"limit must be between 1 and {MAX_PAGE}", details={"field": "limit", "value": limit}
        )
    messages = _messages(cluster_id=cluster_id, where=where)
    return _in_order(
        messages, cluster_id=cluster_id, newest_first=order == "desc", limit=limit, where=where
    )


def message_get(*, cluster_id: str, message_id: str) -> MessageRecord:
    """One message by its id, or ``NotFound`` (a prebuilt statement: every claim's build reads
    its trigger this way)."""
    found = (
        statements.message_by_id(cluster_id=cluster_id, message_id=message_id)
        if storable(cluster_id) and storable(message_id)
        else None
    )
    if found is None:
        raise NotFound(
            f"message {message_id!r} does not exist in cluster {cluster_id!r}",
            details={"message_id": message_id},
        )
    return found


def message_tail(*, cluster_id: str, after: int, limit: int = DEFAULT_PAGE) -> list[MessageRecord]:
    """The cursor for tailing: messages with a sequence above ``after``, in sequence order."""
    return _in_sequence(cluster_id=cluster_id, where=MessageFilter(after=after), limit=limit)


def _in_sequence(*, cluster_id: str, where: MessageFilter, limit: int) -> list[MessageRecord]:
    messages = _messages(cluster_id=cluster_id, where=where)
    if where.search_terms:
        messages = search_narrow(
            messages, terms=where.search_terms, cluster_id=cluster_id, newest_first=False
        )
    else:
        messages = messages.order_by("sequence")
    return [message_record(m, cluster_id=cluster_id) for m in messages[:limit]]


def message_select(
    *,
    cluster_id: str,
    where: MessageFilter,
    newest_first: bool = False,
    limit: int | None = None,
) -> list[MessageRecord]:
    """One context source's rows: a topic (and sender), newest or oldest first, LIMITed.

    Served by ``msg_context_topic`` / ``msg_context_topic_sender``: the cost follows the rows
    returned, not the size of the ledger. One prebuilt statement per shape of ``where``.
    """
    if not statements.preparable(where):
        messages = _messages(cluster_id=cluster_id, where=where)
        return _in_order(
            messages, cluster_id=cluster_id, newest_first=newest_first, limit=limit, where=where
        )
    filter_check(where)
    return statements.messages_in_order(
        cluster_id=cluster_id, where=where, newest_first=newest_first, limit=limit
    )


def message_select_each(
    *, cluster_id: str, wheres: Sequence[MessageFilter], limit: int
) -> list[MessageRecord]:
    """``message_select`` (oldest first, at most ``limit``) of each filter, their rows together:
    one statement of one seek each when the prebuilt statements express every filter. In no
    order from one filter to the next."""
    if not all(statements.preparable(where) for where in wheres):
        return [
            message
            for where in wheres
            for message in message_select(cluster_id=cluster_id, where=where, limit=limit)
        ]
    for where in wheres:
        filter_check(where)
    return statements.messages_of_each(cluster_id=cluster_id, wheres=wheres, limit=limit)


def message_get_with_each(
    *, cluster_id: str, message_id: str, wheres: Sequence[MessageFilter], limit: int
) -> tuple[MessageRecord, list[MessageRecord]]:
    """``message_get`` and ``message_select_each`` together: one statement when the prebuilt
    statements express every filter (a claim's build reads its trigger and its agent's
    guidance this way)."""
    if not (storable(cluster_id) and storable(message_id)) or not all(
        statements.preparable(where) for where in wheres
    ):
        message = message_get(cluster_id=cluster_id, message_id=message_id)
        return message, message_select_each(cluster_id=cluster_id, wheres=wheres, limit=limit)
    for where in wheres:
        filter_check(where)
    found, each = statements.message_and_oldest_of_each(
        cluster_id=cluster_id, message_id=message_id, wheres=wheres, limit=limit
    )
    if found is None:
        raise NotFound(
            f"message {message_id!r} does not exist in cluster {cluster_id!r}",
            details={"message_id": message_id},
        )
    return found, each


def message_latest(
    *, cluster_id: str, topics: Sequence[str] | None = None, where: MessageFilter = NO_FILTER
) -> MessageRecord | None:
    """The newest message of the cluster (or of some topics) that passes a filter.

    With topics, one statement of one LIMIT 1 seek per topic (``UNION ALL``): an ``IN`` over
    several topics cannot be read in timestamp order from one index and would sort every
    matching row.
    """
    if not topics:
        found = message_select(cluster_id=cluster_id, where=where, newest_first=True, limit=1)
        return found[0] if found else None
    distinct = list(dict.fromkeys(topics))
    narrowed = replace(where, topic=None)
    if statements.preparable(narrowed):
        filter_check(replace(where, topic=tuple(distinct)))
        candidates = statements.newest_of_topics(
            cluster_id=cluster_id, topics=distinct, where=narrowed
        )
    else:  # a search, whose words decide the order: one query per topic
        candidates = [
            found[0]
            for topic in distinct
            if (
                found := message_select(
                    cluster_id=cluster_id,
                    where=replace(where, topic=topic),
                    newest_first=True,
                    limit=1,
                )
            )
        ]
    return max(candidates, key=lambda m: (m.timestamp, m.sequence)) if candidates else None


def message_latest_by_cluster(
    *, cluster_ids: Sequence[str], topic: str
) -> dict[str, MessageRecord]:
    """The newest message of ``topic`` in each of the clusters, in one query (for a list of
    clusters: each ended cluster holds one ending message, so the rows read stay few). Read on
    the index ``msg_cluster_topic``."""
    if not cluster_ids:
        return {}
    found: dict[str, MessageRecord] = {}
    rows = Message.objects.filter(cluster_id__in=list(cluster_ids), topic=topic).order_by(
        "cluster_id", "-timestamp", "-sequence"
    )
    for message in rows:
        found.setdefault(message.cluster_id, message_record(message))
    return found


def clusters_holding_topic(*, cluster_ids: Sequence[str], topic: str) -> set[str]:
    """Those of ``cluster_ids`` that hold a message of ``topic``: one query, one seek of the
    index ``msg_cluster_topic`` a cluster, however many such messages each holds."""
    found: set[str] = set()
    ids = sorted(set(cluster_ids))
    held = Message.objects.filter(cluster_id=OuterRef("pk"), topic=topic)
    for start in range(0, len(ids), CLUSTERS_PER_QUERY):
        found.update(
            Cluster.objects.filter(pk__in=ids[start : start + CLUSTERS_PER_QUERY])
            .filter(Exists(held))
            .values_list("pk", flat=True)
        )
    return found


def message_at_sequence(*, cluster_id: str, sequence: int) -> MessageRecord:
    """The message with a given sequence, or ``NotFound`` (a prebuilt statement: the
    snapshotter reads one on each turn with a trigger message)."""
    findable = storable(cluster_id) and isinstance(sequence, int) and 0 <= sequence <= INT64_MAX
    found = (
        statements.message_by_sequence(cluster_id=cluster_id, sequence=sequence)
        if findable
        else None
    )
    if found is None:
        raise NotFound(
            f"cluster {cluster_id!r} has no message with sequence {sequence}",
            details={"sequence": sequence},
        )
    return found


def lifecycle_event_latest(
    *, cluster_id: str, agent_id: str, event: str, until: int | None = None
) -> MessageRecord | None:
    """The newest ``AGENT_LIFECYCLE`` message of an agent whose ``content.data.event`` matches.

    One seek on the index ``msg_lifecycle_event``.
    """
    where = MessageFilter(topic=Topic.AGENT_LIFECYCLE, sender=agent_id, until=until)
    filter_check(where)
    if text_problem(event) is not None:
        return None
    found = statements.messages_in_order(
        cluster_id=cluster_id, where=where, newest_first=True, limit=1, event=event
    )
    return found[0] if found else None


TIMELINE_PAGE = 100


def message_timeline(
    *,
    cluster_id: str,
    where: MessageFilter = NO_FILTER,
    before: int | None = None,
    after: int | None = None,
    limit: int = TIMELINE_PAGE,
) -> tuple[list[MessageRecord], bool]:
    """One page of the dashboard timeline, newest first, and whether a further page exists.

    ``before`` / ``after`` are sequence cursors: the page holds the messages just older (or just
    newer) than that message in (timestamp, sequence) order. The cursor's timestamp is read in a
    subquery, so a page is one query whatever the filters, on the (cluster[, topic|sender],
    timestamp, sequence) indexes. "Further" means older for ``before``/no cursor, newer for
    ``after``. Without a cursor or search words the page is a prebuilt statement
    (``ledger.statements``).
    """
    filter_check(where)
    for name, cursor_value in (("before", before), ("after", after)):
        if cursor_value is not None:
            integer_check(cursor_value, field=name, minimum=0, maximum=INT64_MAX)
    cursor = before if before is not None else after
    newest_first = after is None
    if cursor is None and statements.preparable(where):
        # The newest page without search words, what nearly every page load asks: one prebuilt
        # statement, no ORM query to compile nor model instances to build (docs/decisions/0215).
        rows = statements.messages_in_order(
            cluster_id=cluster_id, where=where, newest_first=True, limit=limit + 1
        )
        return rows[:limit], len(rows) > limit
    messages = _messages(cluster_id=cluster_id, where=where)
    if cursor is not None:
        at = Subquery(
            Message.objects.filter(cluster_id=cluster_id, sequence=cursor).values("timestamp")[:1]
        )
        if before is not None:
            messages = messages.filter(Q(timestamp__lt=at) | Q(timestamp=at, sequence__lt=cursor))
        else:
            messages = messages.filter(Q(timestamp__gt=at) | Q(timestamp=at, sequence__gt=cursor))
    rows = _in_order(
        messages, cluster_id=cluster_id, newest_first=newest_first, limit=limit + 1, where=where
    )
    more = len(rows) > limit
    rows = rows[:limit]
    if not newest_first:
        rows.reverse()
    return rows, more


def message_search(
    *,
    cluster_id: str,
    where: MessageFilter,
    before: int | None = None,
    after: int | None = None,
    limit: int = TIMELINE_PAGE,
) -> tuple[list[SearchHit], bool]:
    """One page of a full-text search (``where.q``), newest first, each hit with its snippet.

    Like ``message_timeline`` but in sequence order, which is the search index's own:
    ``before`` / ``after`` are sequence cursors, and "further" means older for ``before`` or no
    cursor, newer for ``after``. One query, snippets included.
    """
    terms = where.search_terms
    if not terms:
        raise InvalidInput("a search needs at least one word", details={"field": "q"})
    newest_first = after is None
    found = search_narrow(
        _messages(cluster_id=cluster_id, where=where),
        terms=terms,
        cluster_id=cluster_id,
        newest_first=newest_first,
        before=before,
        after=after,
        snippets=True,
    )[: limit + 1]
    hits = [
        SearchHit(
            message=message_record(m, cluster_id=cluster_id),
            snippet=str(getattr(m, "search_snippet", "") or ""),
        )
        for m in found
    ]
    more = len(hits) > limit
    hits = hits[:limit]
    if not newest_first:
        hits.reverse()
    return hits, more


def message_tail_topics(
    *,
    cluster_id: str,
    topics: Sequence[str],
    after: int,
    up_to_sequence: int | None = None,
    limit: int = DEFAULT_PAGE,
) -> list[MessageRecord]:
    """Messages of some topics with a sequence above ``after``, in sequence order, LIMITed.

    Walks the ``(cluster, sequence)`` unique index from ``after``: the cost follows the messages
    since that point, which callers keep short by moving ``after`` forward.
    """
    distinct = tuple(dict.fromkeys(topics))
    where = MessageFilter(topic=distinct, after=after, up_to_sequence=up_to_sequence)
    filter_check(where)
    if not distinct or limit <= 0:
        return []
    # A prebuilt statement: the snapshotter reads this on every batch with a trigger message.
    return statements.messages_of_topics_after(
        cluster_id=cluster_id, topics=distinct, after=after, upto=up_to_sequence, limit=limit
    )


def message_window(
    *,
    cluster_id: str,
    up_to_sequence: int,
    limit: int,
    skip_topic: str | None = None,
    only_topic: str | None = None,
) -> list[MessageRecord]:
    """The newest ``limit`` messages up to a sequence (without one topic, or of one topic
    only), oldest first.

    Walks the ``(cluster, sequence)`` unique index backwards from ``up_to_sequence``.
    """
    messages = _messages(cluster_id=cluster_id, where=MessageFilter(up_to_sequence=up_to_sequence))
    if skip_topic is not None:
        messages = messages.exclude(topic=skip_topic)
    if only_topic is not None:
        messages = messages.filter(topic=only_topic)
    newest = list(messages.order_by("-sequence")[:limit])
    newest.reverse()
    return [message_record(m, cluster_id=cluster_id) for m in newest]


def _with_oldest_undispatched(clusters: QuerySet[Cluster]) -> QuerySet[Cluster]:
    """Clusters with the timestamp of the first message after their pipeline's cursor: one
    seek on the unique (cluster, sequence) index each."""
    first = Message.objects.filter(
        cluster_id=OuterRef("pk"), sequence=OuterRef("pipeline_sequence") + 1
    ).values("timestamp")[:1]
    return clusters.annotate(oldest_undispatched=Subquery(first))


def _lag(row: tuple[str, int, int, int | None], now: int) -> PipelineLag:
    cluster_id, last, cursor, oldest = row
    behind = cursor < last and oldest is not None
    return PipelineLag(
        cluster_id=cluster_id,
        last_sequence=last,
        pipeline_sequence=cursor,
        oldest_timestamp=oldest if behind else None,
        oldest_age_ms=max(0, now - oldest) if behind and oldest is not None else None,
    )


_LAG_FIELDS = ("id", "last_sequence", "pipeline_sequence", "oldest_undispatched")


def pipeline_lag(*, cluster_id: str, now: int) -> PipelineLag:
    """How far the pipeline is behind one cluster (one query), or ``NotFound``."""
    clusters = _with_oldest_undispatched(Cluster.objects.filter(pk=cluster_id))
    row = clusters.values_list(*_LAG_FIELDS).first()
    if row is None:
        raise NotFound(f"cluster {cluster_id!r} not found", details={"cluster_id": cluster_id})
    return _lag(row, now)


def pipeline_lags(*, now: int, limit: int = 100) -> list[PipelineLag]:
    """The clusters the pipeline is behind, the longest-waiting first, at most ``limit`` (one
    query; the partial index ``cluster_pipeline_lagging`` holds only lagging clusters)."""
    integer_check(limit, field="limit", minimum=1, maximum=MAX_PAGE)
    lagging = Cluster.objects.filter(pipeline_sequence__lt=F("last_sequence"))
    rows = _with_oldest_undispatched(lagging).order_by(
        F("oldest_undispatched").asc(nulls_last=True), "id"
    )
    return [_lag(row, now) for row in rows.values_list(*_LAG_FIELDS)[:limit]]
