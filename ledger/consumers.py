"""The live stream of a cluster's messages (SPEC §6.3)."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from ledger.fanout import Send, frame_send, message_fanout, message_frame
from ledger.keys import ApiKeyIdentity, api_key_authenticate
from ledger.push import cluster_group
from ledger.selectors import cluster_exists, message_tail
from ledger.validation import INT64_MAX

logger = logging.getLogger(__name__)

# Close codes in the application range (4000-4999) so that clients can tell why.
CLOSE_UNAUTHORIZED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404


def presented_key(scope: dict[str, Any]) -> str | None:
    """The API key from the ``key`` query parameter or an ``Authorization: Bearer`` header."""
    query = parse_qs(scope.get("query_string", b"").decode())
    if query.get("key"):
        return str(query["key"][0])
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            scheme, _, token = value.decode().partition(" ")
            if scheme.lower() == "bearer" and token:
                return str(token).strip()
    return None


def websocket_refusal_sync(scope: dict[str, Any], cluster_id: str, *, keys: bool = True) -> int:
    """0 when the client may follow the cluster, else the close code.

    A signed-in session may follow any cluster; with ``keys``, so may an API key that is not
    limited to another cluster (agents); without, API keys are refused (the dashboard's pages).
    """
    user = scope.get("user")
    identity: ApiKeyIdentity | None = None
    if user is None or not user.is_authenticated:
        if not keys:
            return CLOSE_UNAUTHORIZED
        key = presented_key(scope)
        identity = api_key_authenticate(plain=key) if key else None
        if identity is None:
            return CLOSE_UNAUTHORIZED
        if not identity.may_access(cluster_id):
            return CLOSE_FORBIDDEN
    if not cluster_exists(cluster_id=cluster_id):
        return CLOSE_NOT_FOUND
    return 0


websocket_refusal = database_sync_to_async(websocket_refusal_sync)


async def websocket_refuse(consumer: Any, code: int) -> None:
    """Accept, then close with ``code``: a handshake refused outright reaches clients as an
    HTTP 403 in which no close code survives, so they could not tell why."""
    await consumer.accept()
    await consumer.close(code=code)


def resume_after(scope: dict[str, Any]) -> int | None:
    """The ``after`` query parameter: the last sequence a reconnecting client has, if any."""
    values = parse_qs(scope.get("query_string", b"").decode()).get("after")
    if not values:
        return None
    raw = values[0].strip()
    if not raw.isascii() or not raw.isdigit() or len(raw) > 19:
        return None
    after = int(raw)
    return after if after <= INT64_MAX else None


# Messages read from the ledger per query while a reconnecting client catches up.
RESYNC_PAGE = 500


class ClusterMessagesConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    """Sends ``{"type": "message", "data": <message>}`` for each new message of one cluster.

    A client that reconnects with ``?after=<last sequence it has>`` first gets every message
    it missed, read from the ledger, then the live ones: each message once, in sequence order
    (SPEC §1.4: a dropped push costs nothing). The sockets of a cluster on one process share
    one channel-layer subscription and each message's frame (``ledger.fanout``).
    """

    # No channel of its own: the cluster's sockets share one (``MessageFanout``).
    channel_layer_alias = "ledger.fanout-only"
    group: str | None = None
    # The highest sequence sent from the ledger on reconnection: a live push at or below it was
    # sent already. Live pushes above it go out as they come (with several servers, pushes of
    # different servers may arrive out of sequence; the ``data.sequence`` tells).
    resynced_up_to: int = 0
    # Pushes that came before the socket was accepted and caught up, written right after.
    backlog: list[tuple[int, dict[str, Any]]] | None = None
    # Where the pushed frames go: the server's own send (``ledger.fanout.frame_send``).
    frame_send: Send

    async def connect(self) -> None:
        self.frame_send = frame_send(self.scope, self.base_send)
        cluster_id = self.scope["url_route"]["kwargs"]["cluster_id"]
        refusal = await websocket_refusal(self.scope, cluster_id)
        if refusal:
            await websocket_refuse(self, refusal)
            return
        # Join before reading the backlog: a message committed in between is then both read
        # and pushed, and the push is skipped, instead of being neither.
        group = cluster_group(cluster_id)
        self.backlog = []
        await message_fanout.join(group, self)
        self.group = group
        await self.accept()
        after = resume_after(self.scope)
        if after is not None:
            await self._resync(cluster_id, after)
        while self.backlog:
            sequence, sent = self.backlog.pop(0)
            await self._send_live(sequence, sent)
        self.backlog = None

    async def _resync(self, cluster_id: str, after: int) -> None:
        self.resynced_up_to = after
        while True:
            page = await database_sync_to_async(message_tail)(
                cluster_id=cluster_id, after=self.resynced_up_to, limit=RESYNC_PAGE
            )
            for record in page:
                await self.send(text_data=message_frame(record.to_wire()))
            if page:
                self.resynced_up_to = page[-1].sequence
            if len(page) < RESYNC_PAGE:
                return

    async def disconnect(self, code: int) -> None:
        if self.group is not None:
            await message_fanout.leave(self.group, self)

    async def write(self, sequence: int, sent: dict[str, Any]) -> None:
        """One pushed message's ``websocket.send``, kept for later while the socket connects and
        catches up. Written once per socket per message: one coroutine, nothing built."""
        if self.backlog is not None:
            self.backlog.append((sequence, sent))
        elif sequence > self.resynced_up_to:
            try:
                await self.frame_send(sent)
            except Exception:
                # A socket that went away meanwhile; the others still get the frame.
                logger.debug("push to a closed cluster stream", exc_info=True)

    async def _send_live(self, sequence: int, sent: dict[str, Any]) -> None:
        """``write`` for a push held back while the socket connected (``backlog``)."""
        if sequence <= self.resynced_up_to:
            return
        try:
            await self.frame_send(sent)
        except Exception:
            logger.debug("push to a closed cluster stream", exc_info=True)
