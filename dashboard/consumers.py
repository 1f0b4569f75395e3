"""The cluster page's live timeline: each new message pushed as rendered out-of-band fragments.

A push carries the message's timeline row (when the page's filters want it), the header's
message count and, for a ``STATE_SNAPSHOT``, the snapshot panel (``dashboard.fragments``).
``views.clusters.timeline_missed`` sends the same fragments to a page that reconnects.
A message is rendered once per process, however many pages show its cluster (``SharedRenders``).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from dashboard.fragments import PushFragments, push_fragments
from ledger.interfaces import (
    JSON,
    MessageRecord,
    cluster_group,
    websocket_refusal,
    websocket_refuse,
)

# (cluster id, sequence, message id): the id tells a re-created cluster's messages apart.
_Key = tuple[str, str, str]


class SharedRenders:
    """Each pushed message rendered once per process, however many sockets show its cluster.

    Every socket in a cluster's group receives every push. The first socket to handle one starts
    its render (in a worker thread: templates are synchronous); sockets that handle it meanwhile
    await that same render, and later ones find it among the recent renders. Each socket's
    filters then only choose between ready strings. Recent renders are kept up to ``keep``
    messages and ``keep_chars`` characters, ample for every socket of the process to handle a
    push (or a coalesced run of them) first; a socket that falls further behind renders again.
    Renders belong to the event loop that started them (one per server process).
    """

    def __init__(self, *, keep: int = 256, keep_chars: int = 8_000_000) -> None:
        self.keep = keep
        self.keep_chars = keep_chars
        self.renders = 0  # renders started, for the tests and a debugger
        self._recent: OrderedDict[_Key, PushFragments] = OrderedDict()
        self._recent_chars = 0
        self._pending: dict[_Key, asyncio.Task[PushFragments]] = {}

    async def fragments(self, wire: dict[str, JSON]) -> PushFragments:
        """The rendered fragments of the message whose wire shape is ``wire``."""
        key = (str(wire["cluster_id"]), str(wire["sequence"]), str(wire["id"]))
        done = self._recent.get(key)
        if done is not None:
            return done
        loop = asyncio.get_running_loop()
        pending = self._pending.get(key)
        if pending is None or pending.get_loop() is not loop:
            pending = loop.create_task(self._render(key, wire))
            self._pending[key] = pending
        # Shielded: a socket that closes while it waits must not cancel the others' render.
        return await asyncio.shield(pending)

    async def _render(self, key: _Key, wire: dict[str, JSON]) -> PushFragments:
        self.renders += 1
        try:
            fragments = await sync_to_async(push_fragments, thread_sensitive=False)(
                MessageRecord.from_wire(wire)
            )
        finally:
            if self._pending.get(key) is asyncio.current_task():
                del self._pending[key]
        self._remember(key, fragments)
        return fragments

    def _remember(self, key: _Key, fragments: PushFragments) -> None:
        if key in self._recent:
            return
        self._recent[key] = fragments
        self._recent_chars += len(fragments.row) + len(fragments.rest)
        while len(self._recent) > self.keep or (
            self._recent_chars > self.keep_chars and len(self._recent) > 1
        ):
            _, dropped = self._recent.popitem(last=False)
            self._recent_chars -= len(dropped.row) + len(dropped.rest)


shared_renders = SharedRenders()


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
        fragments = await shared_renders.fragments(wire)
        await self.send(text_data=fragments.html(with_row=self._wanted(wire)))

    async def ledger_messages(self, event: dict[str, Any]) -> None:
        """A coalesced push (the ledger's push loop): all its fragments in one frame."""
        parts = []
        for wire in event["messages"]:
            fragments = await shared_renders.fragments(wire)
            parts.append(fragments.html(with_row=self._wanted(wire)))
        await self.send(text_data="".join(parts))
