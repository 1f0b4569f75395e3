"""The cluster page's live timeline: each new message pushed as rendered out-of-band fragments.

A push carries the message's timeline row (when the page's filters want it), the header's
message count and, for a ``STATE_SNAPSHOT``, the snapshot panel: the same partials the page
renders, so a live page and a reloaded one look the same. ``views.clusters.timeline_missed``
sends the same fragments to a page that reconnects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.template.loader import render_to_string

from ledger.interfaces import (
    JSON,
    MessageRecord,
    cluster_group,
    websocket_refusal,
    websocket_refuse,
)
from snapshots.state import SNAPSHOT_TOPIC

PAGE = "dashboard/cluster_detail.html"


def timeline_rows_html(messages: Sequence[MessageRecord]) -> str:
    """Rows (newest first) wrapped as one out-of-band insert at the top of the timeline."""
    rows = "".join(render_to_string(f"{PAGE}#timeline-row", {"m": m}) for m in messages)
    return f'<ol hx-swap-oob="afterbegin:#timeline-rows">{rows}</ol>'


def count_html(cluster_id: str, last_sequence: int) -> str:
    """The header's message count; sequences run from 1 without gaps, so the last one is it."""
    return render_to_string(
        f"{PAGE}#message-count",
        {"cluster_id": cluster_id, "message_count": last_sequence, "oob": True},
    )


def snapshot_html(snapshot: MessageRecord) -> str:
    """The snapshot panel showing ``snapshot``, as an out-of-band replacement."""
    return render_to_string(f"{PAGE}#snapshot-panel", {"snapshot": snapshot, "oob": True})


def push_html(message: MessageRecord, *, with_row: bool) -> str:
    """Everything one new message changes on the page."""
    fragments = [timeline_rows_html([message])] if with_row else []
    fragments.append(count_html(message.cluster_id, message.sequence))
    if message.topic == SNAPSHOT_TOPIC:
        fragments.append(snapshot_html(message))
    return "".join(fragments)


class ClusterTimelineConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]
    """Pushes each new message of a cluster to its page as rendered fragments.

    Signed-in sessions only (the page's own cookie); API keys belong to agents, not to pages.
    The page's ``topic``, ``sender`` and ``since`` filters arrive in the query string so that a
    filtered timeline only grows by rows it would show; a search (``q``) gets no rows (they
    come from searching again), only the header and the snapshot.
    """

    group: str | None = None
    topic: str = ""
    sender: str = ""
    since: int | None = None
    searching: bool = False

    async def connect(self) -> None:
        cluster_id = self.scope["url_route"]["kwargs"]["cluster_id"]
        refusal = await websocket_refusal(self.scope, cluster_id, keys=False)
        if refusal:
            await websocket_refuse(self, refusal)
            return
        query = parse_qs(self.scope.get("query_string", b"").decode())
        self.topic = query.get("topic", [""])[0].strip()
        self.sender = query.get("sender", [""])[0].strip()
        since = query.get("since", [""])[0].strip()
        self.since = int(since) if since.isdigit() else None
        self.searching = bool(query.get("q", [""])[0].strip())
        self.group = cluster_group(cluster_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    def _wanted(self, wire: dict[str, JSON]) -> bool:
        if self.searching:
            return False
        if self.topic and wire.get("topic") != self.topic:
            return False
        if self.sender and wire.get("sender") != self.sender:
            return False
        return self.since is None or int(wire.get("timestamp", 0)) >= self.since

    async def ledger_message(self, event: dict[str, Any]) -> None:
        wire = event["message"]
        html = await sync_to_async(push_html, thread_sensitive=False)(
            MessageRecord.from_wire(wire), with_row=self._wanted(wire)
        )
        await self.send(text_data=html)

    async def ledger_messages(self, event: dict[str, Any]) -> None:
        """A coalesced push (the ledger's push loop): each message as if pushed alone."""
        for wire in event["messages"]:
            await self.ledger_message({"message": wire})
