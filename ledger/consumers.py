"""The live stream of a cluster's messages (SPEC §6.3)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from ledger.keys import ApiKeyIdentity, api_key_authenticate
from ledger.push import cluster_group
from ledger.selectors import cluster_exists, message_tail
from ledger.validation import INT64_MAX

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
    (SPEC §1.4: a dropped push costs nothing).
    """

    group: str | None = None
    # The highest sequence sent from the ledger on reconnection: a live push at or below it was
    # sent already. Live pushes above it go out as they come (with several servers, pushes of
    # different servers may arrive out of sequence; the ``data.sequence`` tells).
    resynced_up_to: int = 0

    async def connect(self) -> None:
        cluster_id = self.scope["url_route"]["kwargs"]["cluster_id"]
        refusal = await websocket_refusal(self.scope, cluster_id)
        if refusal:
            await websocket_refuse(self, refusal)
            return
        # Join before reading the backlog: a message committed in between is then both read
        # and pushed, and the push is skipped, instead of being neither.
        self.group = cluster_group(cluster_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        after = resume_after(self.scope)
        if after is not None:
            await self._resync(cluster_id, after)

    async def _resync(self, cluster_id: str, after: int) -> None:
        self.resynced_up_to = after
        while True:
            page = await database_sync_to_async(message_tail)(
                cluster_id=cluster_id, after=self.resynced_up_to, limit=RESYNC_PAGE
            )
            for record in page:
                await self.send_json({"type": "message", "data": record.to_wire()})
            if page:
                self.resynced_up_to = page[-1].sequence
            if len(page) < RESYNC_PAGE:
                return

    async def disconnect(self, code: int) -> None:
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def ledger_message(self, event: dict[str, Any]) -> None:
        wire = event["message"]
        if int(wire.get("sequence", 0)) <= self.resynced_up_to:
            return
        await self.send_json({"type": "message", "data": wire})

    async def ledger_messages(self, event: dict[str, Any]) -> None:
        """A coalesced push (``ledger/push.py``): the same frames, one per message."""
        for wire in event["messages"]:
            await self.ledger_message({"message": wire})
