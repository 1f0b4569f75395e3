"""The cluster page's live timeline: each new message pushed as rendered out-of-band fragments.

A push carries each message's timeline row (when the page's filters want it) and, for a
``STATE_SNAPSHOT``, the snapshot panel, then the header's message count once
(``dashboard.fragments``).
``views.clusters.timeline_missed`` sends the same fragments to a page that reconnects.
A message is rendered once per process, however many pages show its cluster (``SharedRenders``),
and received once per process: the pages of a cluster share one channel-layer subscription
whose frames are written to each of them (``ClusterFanout``, docs/decisions/0160-push-fanout.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import Any
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from dashboard.fragments import PushFragments, count_html, push_fragments
from ledger.interfaces import (
    JSON,
    GroupFanout,
    MessageRecord,
    Send,
    cluster_group,
    frame_send,
    pushed_messages,
    websocket_refusal,
    websocket_refuse,
)

logger = logging.getLogger(__name__)

# (cluster id, sequence, message id): the id tells a re-created cluster's messages apart.
_Key = tuple[str, str, str]


def render_all(wires: list[dict[str, JSON]]) -> list[PushFragments]:
    """The fragments of each message (wire shapes), rendered in the calling thread."""
    return [push_fragments(MessageRecord.from_wire(wire)) for wire in wires]


class SharedRenders:
    """Each pushed message rendered once per process, however many sockets show its cluster.

    The messages of a delivery that have not been rendered yet are rendered together, in one
    worker thread (templates are synchronous): one thread hop per delivery, not per message.
    Sockets that ask for them meanwhile await that same render, and later ones find them among
    the recent renders. Each socket's filters then only choose between ready strings. Recent
    renders are kept up to ``keep`` messages and ``keep_chars`` characters, ample for every
    socket of the process to handle a push (or a gathered run of them) first; a socket that
    falls further behind renders again. Renders belong to the event loop that started them
    (one per server process).
    """

    def __init__(self, *, keep: int = 256, keep_chars: int = 8_000_000) -> None:
        self.keep = keep
        self.keep_chars = keep_chars
        self.renders = 0  # messages rendered, for the tests and a debugger
        self._recent: OrderedDict[_Key, PushFragments] = OrderedDict()
        self._recent_chars = 0
        self._pending: dict[_Key, asyncio.Task[dict[_Key, PushFragments]]] = {}

    async def fragments(self, wire: dict[str, JSON]) -> PushFragments:
        """The rendered fragments of the message whose wire shape is ``wire``."""
        return (await self.fragments_of([wire]))[0]

    async def fragments_of(self, wires: list[dict[str, JSON]]) -> list[PushFragments]:
        """The rendered fragments of each message (wire shapes), in order."""
        loop = asyncio.get_running_loop()
        found: list[PushFragments | asyncio.Task[dict[_Key, PushFragments]]] = []
        keys = [(str(w["cluster_id"]), str(w["sequence"]), str(w["id"])) for w in wires]
        missing: dict[_Key, dict[str, JSON]] = {}
        for key, wire in zip(keys, wires, strict=True):
            pending = self._pending.get(key)
            if key not in self._recent and (pending is None or pending.get_loop() is not loop):
                missing[key] = wire
        if missing:
            started = loop.create_task(self._render(missing))
            for key in missing:
                self._pending[key] = started
        for key in keys:
            done = self._recent.get(key)
            found.append(done if done is not None else self._pending[key])
        rendered = []
        for key, item in zip(keys, found, strict=True):
            if isinstance(item, PushFragments):
                rendered.append(item)
            else:
                # Shielded: a socket that closes while it waits must not cancel the others'.
                rendered.append((await asyncio.shield(item))[key])
        return rendered

    async def _render(self, wanted: dict[_Key, dict[str, JSON]]) -> dict[_Key, PushFragments]:
        self.renders += len(wanted)
        try:
            fragments = await sync_to_async(render_all, thread_sensitive=False)(
                list(wanted.values())
            )
        finally:
            for key in wanted:
                if self._pending.get(key) is asyncio.current_task():
                    del self._pending[key]
        rendered = dict(zip(wanted, fragments, strict=True))
        for key, one in rendered.items():
            self._remember(key, one)
        return rendered

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


class ClusterFanout(GroupFanout["ClusterTimelineConsumer"]):
    """One channel-layer subscription per cluster per process, its pushes written to each page.

    The subscription is ``GroupFanout``'s (the first page of a cluster subscribes the process,
    the last one unsubscribes it). A push after a quiet moment is written at once; the pushes
    that arrive within the gathering moment of a frame (``gather_seconds_for`` the pages open),
    or while it is being written, go to each page as the next frame, one holding all of their
    fragments in order (htmx swaps any number of out-of-band fragments from one frame): under a
    burst of publishes a page gets at most one frame per moment, far fewer than messages, and a
    frame's write is most of what a page costs per push (docs/decisions/0275, 0305). Each
    message is rendered once (``SharedRenders``) and each frame built once per distinct choice
    of rows the pages' filters make (one, when the pages show the same rows).
    """

    # The time between two frames to a cluster's pages grows with the pages open on the
    # process: each page's frame is a write of its own, a system call whose cost hardly depends
    # on its size (8-12 µs for 0.5-15 KB on loopback), so the writes to a cluster's pages are
    # held to about ``page_writes_per_second`` (5,000: a few percent of a core) however fast
    # messages come. Under a burst, a few pages get a frame every 5 ms, 100 pages one every
    # 20 ms, 200 pages or more one every 40 ms: a push waits 40 ms at most, within its p50
    # budget of 50 ms (docs/decisions/0305).
    gather_seconds = 0.005
    most_gather_seconds = 0.04
    page_writes_per_second = 5000

    def __init__(self, renders: SharedRenders) -> None:
        super().__init__()
        self.renders = renders
        self.frames = 0  # frames built

    def gather_seconds_for(self, members: int) -> float:
        spread = min(self.most_gather_seconds, members / self.page_writes_per_second)
        return max(self.gather_seconds, spread)

    async def deliver(
        self, members: list[ClusterTimelineConsumer], events: list[dict[str, Any]]
    ) -> None:
        wires = [wire for event in events for wire in pushed_messages(event)]
        if not wires:
            return
        rendered = await self.renders.fragments_of(wires)
        # The header's count, once a frame: the last message's sequence is the cluster's count.
        last = wires[-1]
        count = count_html(str(last["cluster_id"]), int(str(last["sequence"])))
        # Pages with the same filters want the same rows: chosen once per filters, and one
        # ``websocket.send`` per distinct frame, the same object for every page it goes to.
        by_filters: dict[tuple[object, ...], dict[str, Any]] = {}
        frames: dict[tuple[bool, ...], dict[str, Any]] = {}
        for page in members:
            sent = by_filters.get(page.filters)
            if sent is None:
                wanted = tuple(page.wanted(wire) for wire in wires)
                sent = frames.get(wanted)
                if sent is None:
                    self.frames += 1
                    frame = "".join(
                        fragments.html(with_row=row)
                        for fragments, row in zip(rendered, wanted, strict=True)
                    )
                    frame += count
                    sent = frames[wanted] = {"type": "websocket.send", "text": frame}
                by_filters[page.filters] = sent
            await page.write(sent)


fanout = ClusterFanout(shared_renders)


class ClusterTimelineConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]
    """Pushes each new message of a cluster to its page as rendered fragments.

    Signed-in sessions only (the page's own cookie); API keys belong to agents, not to pages.
    The page's ``topic``, ``sender`` and ``since`` filters arrive in the query string so that a
    filtered timeline only grows by rows it would show; a search (``q``) gets no rows (they
    come from searching again), only the header and the snapshot.
    """

    # No channel of its own: the cluster's pages share one (``ClusterFanout``).
    channel_layer_alias = "dashboard.fanout-only"
    group: str | None = None
    topic: str = ""
    sender: str = ""
    since: int | None = None
    searching: bool = False
    # What ``wanted`` reads, as one key: pages with equal filters want the same rows.
    filters: tuple[object, ...] = ()
    # Frames pushed before the page was accepted, written right after it is.
    backlog: list[dict[str, Any]] | None = None
    # Where the pushed frames go: the server's own send (``ledger.fanout.frame_send``).
    frame_send: Send

    async def connect(self) -> None:
        self.frame_send = frame_send(self.scope, self.base_send)
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
        self.filters = (self.searching, self.topic, self.sender, self.since)
        group = cluster_group(cluster_id)
        self.backlog = []
        await fanout.join(group, self)
        self.group = group
        await self.accept()
        while self.backlog:
            await self.send(text_data=self.backlog.pop(0)["text"])
        self.backlog = None

    async def disconnect(self, code: int) -> None:
        if self.group is not None:
            await fanout.leave(self.group, self)

    def wanted(self, wire: dict[str, JSON]) -> bool:
        """Whether the page's filters show the message's row."""
        if self.searching:
            return False
        if self.topic and wire.get("topic") != self.topic:
            return False
        if self.sender and wire.get("sender") != self.sender:
            return False
        return self.since is None or int(wire.get("timestamp", 0)) >= self.since

    async def write(self, sent: dict[str, Any]) -> None:
        """Send one pushed frame (its ``websocket.send``), kept for after the accept while the
        page is connecting."""
        if self.backlog is not None:
            self.backlog.append(sent)
            return
        try:
            await self.frame_send(sent)
        except Exception:
            # A page that went away meanwhile; the others still get the frame.
            logger.debug("push to a closed cluster page", exc_info=True)
