"""CPU of one websocket text frame written by daphne's websocket layer (autobahn), and its parts.

Usage: ``.venv/bin/python bench/ws_frame_cost.py [--size 1800] [--frames 20000]``

autobahn's ``sendMessage`` of a text frame on a Twisted ``StringTransport`` (no socket: the
frame's CPU in the library, not the kernel's), then the arguments of the debug line its
``sendData`` formats for every frame whether debug logging is on or not (``hltype``/``hlval``,
coloured by ``click.style``), then ``sendMessage`` again with that colouring off. Best of
three runs, CPU per frame in µs. Prints the figures; it changes nothing in the app.
"""

from __future__ import annotations

import argparse
import time

import autobahn.util
from autobahn.twisted.websocket import WebSocketServerFactory, WebSocketServerProtocol
from autobahn.websocket.protocol import WebSocketProtocol
from twisted.internet.testing import StringTransport


def per_frame_us(
    protocol: WebSocketServerProtocol, transport: StringTransport, payload: bytes, frames: int
) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        for _ in range(frames):
            protocol.sendMessage(payload, False)
            transport.clear()
        best = min(best, (time.process_time() - started) / frames * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1800, help="frame payload bytes")
    parser.add_argument("--frames", type=int, default=20_000)
    args = parser.parse_args()
    protocol = WebSocketServerProtocol()
    protocol.factory = WebSocketServerFactory()
    transport = StringTransport()
    protocol.makeConnection(transport)
    protocol.state = WebSocketProtocol.STATE_OPEN
    protocol.websocket_version = 13
    protocol._perMessageCompress = None
    payload = b"x" * args.size

    send = per_frame_us(protocol, transport, payload, args.frames)
    started = time.process_time()
    for _ in range(args.frames):
        autobahn.util.hltype(protocol.sendData)
        autobahn.util.hlval(protocol.peer)
        autobahn.util.hlval(args.size)
    debug = (time.process_time() - started) / args.frames * 1e6
    autobahn.util._HAS_CLICK = False  # this process only: what the colouring costs
    plain = per_frame_us(protocol, transport, payload, args.frames)
    print(f"autobahn {autobahn.__version__}, {args.size}-byte text frames, CPU µs per frame:")
    print(f"  sendMessage                         {send:6.2f}")
    print(f"  its debug line's arguments alone    {debug:6.2f}")
    print(f"  sendMessage, click colouring off    {plain:6.2f}")


if __name__ == "__main__":
    main()
