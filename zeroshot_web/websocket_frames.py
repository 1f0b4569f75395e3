"""uvicorn's sans-I/O websockets with a pushed frame's bytes made once for all its sockets.

The fan-outs (``ledger.fanout``) hand one ``websocket.send`` message, the same text object, to
every socket of a cluster on the process. uvicorn encodes that text and the ``websockets``
library frames it again for each socket: an encode, a ``Frame``, its ``serialize`` (two copies
through a ``BytesIO``) and a join, per socket per frame, although a server's frame has no mask
and, without an extension, is the same bytes on every connection. ``SharedFrameProtocol``
serializes a text once and writes those bytes to each open socket it is sent to; whatever is not
that plain case (a handshake, a close, bytes, a socket closing or closed, an extension, the
library's debug log) goes through uvicorn's own ``send`` unchanged
(docs/decisions/0290-a-pushed-frame-serialized-once.md).

Served with ``uvicorn --ws zeroshot_web.websocket_frames:SharedFrameProtocol`` (the Dockerfile).
This module imports no Django: uvicorn loads it before the app.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.frames import Frame, Opcode
from websockets.protocol import State

if TYPE_CHECKING:
    from uvicorn._types import ASGISendEvent


class SerializedFrames:
    """The bytes of the text frames sent last, each found by its text object.

    A text is found by identity, not by value: the fan-out sends the same object to every
    socket, and comparing a frame's text with another would cost what serializing it saves. Each
    entry keeps its text alive, so no other text can take its ``id`` while it is kept. A
    delivery sends one text per distinct choice of rows the pages' filters make, page after
    page, so a few entries serve it; the oldest is forgotten first.
    """

    def __init__(self, *, keep: int = 8) -> None:
        self.keep = keep
        self.serialized = 0  # texts serialized, for the tests and a debugger
        self._frames: OrderedDict[int, tuple[str, bytes]] = OrderedDict()

    def of(self, text: str) -> bytes:
        """The unmasked, unextended, final text frame carrying ``text``, as written on the wire."""
        kept = self._frames.get(id(text))
        if kept is not None and kept[0] is text:
            return kept[1]
        self.serialized += 1
        frame = Frame(Opcode.TEXT, text.encode()).serialize(mask=False, extensions=[])
        self._frames[id(text)] = (text, frame)
        if len(self._frames) > self.keep:
            self._frames.popitem(last=False)
        return frame


serialized_frames = SerializedFrames()


class SharedFrameProtocol(WebSocketsSansIOProtocol):
    """uvicorn's ``websockets-sansio`` protocol, a plain text frame to an open socket written
    from bytes serialized once per text (``SerializedFrames``)."""

    async def send(self, message: ASGISendEvent) -> None:
        if message["type"] != "websocket.send" or message.get("bytes") is not None:
            await super().send(message)
            return
        text = message.get("text")
        # As uvicorn's send: wait while the transport's buffer is full, then look at the state.
        await self.writable.wait()
        conn = self.conn
        if (
            text is None
            or self.disconnected
            or not self.handshake_complete
            or self.close_sent
            or self.initial_response is not None
            or conn.state is not State.OPEN
            or conn.extensions
            or conn.expect_continuation_frame
            or conn.debug
        ):
            # uvicorn's answer to each of these (an error, a refusal, a debug line) is its own.
            await super().send(message)
            return
        pending = conn.data_to_send()  # empty as uvicorn leaves it; written first if not
        if pending:
            self.transport.write(b"".join(pending))
        self.transport.write(serialized_frames.of(text))
