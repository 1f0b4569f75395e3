"""The cluster page's live timeline: each new message pushed as rendered out-of-band fragments.

A push carries the message's timeline row (when the page's filters want it), the header's
message count and, for a ``STATE_SNAPSHOT``, the snapshot panel (``dashboard.fragments``).
``views.clusters.timeline_missed`` sends the same fragments to a page that reconnects.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from dashboard.fragments import push_html
from ledger.interfaces import (
    JSON,
    MessageRecord,
    cluster_group,
    websocket_refusal,
    websocket_refuse,
)


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
