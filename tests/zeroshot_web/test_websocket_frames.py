"""uvicorn's websockets with a pushed frame's bytes made once (``zeroshot_web.websocket_frames``):
a uvicorn server in this process, on the loopback, real websocket clients.

The sockets get the same frames as from uvicorn's own protocol, each text serialized once for
all of them; what is not a plain text frame to an open socket is uvicorn's own answer.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.utils import ClientDisconnected
from websockets.asyncio.client import ClientConnection, connect

from zeroshot_web.websocket_frames import SerializedFrames, SharedFrameProtocol, serialized_frames

Send = Callable[[dict[str, Any]], Awaitable[None]]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Sockets:
    """An ASGI app that accepts every websocket and keeps its ``send``, for the test to write
    frames through; each socket's app runs until its client goes."""

    def __init__(self) -> None:
        self.sends: list[Send] = []
        self.accepted = asyncio.Event()
        self.wanted = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "websocket"
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        self.sends.append(send)
        if len(self.sends) == self.wanted:
            self.accepted.set()
        while (await receive())["type"] != "websocket.disconnect":
            pass


@asynccontextmanager
async def served(
    app: Sockets, count: int, protocol: type[Any] | str = SharedFrameProtocol
) -> AsyncIterator[list[ClientConnection]]:
    """``count`` clients connected to ``app`` served by uvicorn with ``protocol``."""
    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        ws=protocol,
        ws_per_message_deflate=False,
        lifespan="off",
        log_level="warning",
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    app.wanted = count
    clients = [await connect(f"ws://127.0.0.1:{port}/") for _ in range(count)]
    try:
        await asyncio.wait_for(app.accepted.wait(), 10)
        yield clients
    finally:
        for client in clients:
            await client.close()
        server.should_exit = True
        await serving


async def frames_to(count: int, texts: list[str], protocol: type[Any] | str) -> list[list[str]]:
    """What each of ``count`` sockets receives when every text is sent to each of them, as the
    fan-outs do: one message object per text, the same for every socket."""
    app = Sockets()
    async with served(app, count, protocol) as clients:
        for text in texts:
            sent = {"type": "websocket.send", "text": text}
            for send in app.sends:
                await send(sent)
        return [[str(await client.recv()) for _ in texts] for client in clients]


TEXTS = [
    "short",
    "é ünïcode ✓ " * 20,  # multi-byte, over 125 bytes: a 16-bit length
    "<li>row</li>" * 6_000,  # over 65,535 bytes: a 64-bit length
    "",
]


def test_every_socket_gets_each_frame_as_uvicorn_s_own_protocol_writes_it() -> None:
    ours = asyncio.run(frames_to(3, TEXTS, SharedFrameProtocol))
    theirs = asyncio.run(frames_to(3, TEXTS, "websockets-sansio"))

    assert ours == theirs == [TEXTS] * 3


def test_a_text_sent_to_many_sockets_is_serialized_once() -> None:
    before = serialized_frames.serialized

    got = asyncio.run(frames_to(5, ["<li>one</li>", "<li>two</li>"], SharedFrameProtocol))

    assert got == [["<li>one</li>", "<li>two</li>"]] * 5
    assert serialized_frames.serialized - before == 2


def test_frames_are_found_by_their_text_object_and_the_oldest_forgotten() -> None:
    frames = SerializedFrames(keep=2)
    one, two, three = "a" * 200, "b" * 200, "c" * 200
    equal_to_one = "".join(["a" * 100, "a" * 100])  # equal, another object

    first = frames.of(one)
    assert frames.of(one) is first
    assert first == b"\x81\x7e\x00\xc8" + one.encode()  # FIN + text, 16-bit length, no mask
    assert frames.of(equal_to_one) == first
    assert frames.serialized == 2  # an equal text is not the same frame's text
    frames.of(two)
    frames.of(three)
    frames.of(one)  # forgotten: two and three came after it
    assert frames.serialized == 5


def test_a_send_after_the_client_went_is_uvicorn_s_client_disconnected() -> None:
    async def scenario() -> None:
        app = Sockets()
        async with served(app, 1) as (client,):
            await client.close()
            await asyncio.sleep(0.2)
            with pytest.raises(ClientDisconnected):
                await app.sends[0]({"type": "websocket.send", "text": "late"})

    asyncio.run(scenario())


def test_a_send_after_the_close_is_uvicorn_s_error() -> None:
    async def scenario() -> None:
        app = Sockets()
        async with served(app, 1):
            await app.sends[0]({"type": "websocket.close", "code": 1000})
            with pytest.raises(RuntimeError, match=r"after sending 'websocket\.close'"):
                await app.sends[0]({"type": "websocket.send", "text": "late"})

    asyncio.run(scenario())


def test_bytes_still_go_out_as_a_binary_frame() -> None:
    async def scenario() -> bytes | str:
        app = Sockets()
        async with served(app, 1) as (client,):
            await app.sends[0]({"type": "websocket.send", "bytes": b"\x00\x01"})
            return await client.recv()

    assert asyncio.run(scenario()) == b"\x00\x01"
