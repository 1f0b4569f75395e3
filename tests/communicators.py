"""What the suite's websocket tests share.

``WebsocketCommunicator.connect`` waits 1 s by default. A consumer's connect reads the session
and the cluster on a database thread, which on a machine running both halves of the suite at
once has taken longer than that; the tests wait for it instead of failing.
"""

from __future__ import annotations

CONNECT_TIMEOUT = 10
