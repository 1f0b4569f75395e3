"""ASGI entry point: HTTP through Django, websockets through Channels."""

from __future__ import annotations

import asyncio
import gc
import os
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "zeroshot_web.settings")
django.setup(set_prefix=False)

from zeroshot_web.handler import SyncViewHandler  # noqa: E402  (needs the apps loaded)

django_asgi_app = SyncViewHandler()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs the apps loaded)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import OriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402

from ledger import interfaces as ledger  # noqa: E402
from operations.metrics import WebsocketCounter  # noqa: E402
from operations.schedule import retention_daily  # noqa: E402
from operations.tracing import tracing_flush  # noqa: E402
from zeroshot_web.claims import ClaimRoute, claims_end_at_stop_signals  # noqa: E402
from zeroshot_web.leases import LeaseRoute  # noqa: E402
from zeroshot_web.limits import RequestBodyLimit  # noqa: E402
from zeroshot_web.publishing import PublishRoute  # noqa: E402
from zeroshot_web.routing import websocket_urlpatterns  # noqa: E402


class BrowserOriginValidator(OriginValidator):  # type: ignore[misc]
    """Checks the Origin of browsers against ALLOWED_HOSTS; lets through clients that send none.

    The check stops other sites from riding on an operator's session cookie. Agents connect with
    an API key and usually send no Origin at all; they still have to authenticate.

    Each handshake's Origin is matched against every allowed host, each parsed again by Channels
    every time; the answer for an Origin is kept (``KEEP`` of them: a site's pages send one or
    two, and others only fill the room up until it is emptied).
    """

    KEEP = 64

    def __init__(self, application: Any, allowed_origins: Any) -> None:
        super().__init__(application, allowed_origins)
        self.answers: dict[object, bool] = {}

    def valid_origin(self, parsed_origin: object) -> bool:
        if parsed_origin is None:
            return True
        answer = self.answers.get(parsed_origin)
        if answer is None:
            answer = bool(super().valid_origin(parsed_origin))
            if len(self.answers) >= self.KEEP:
                self.answers.clear()
            self.answers[parsed_origin] = answer
        return answer


def startup_heap_frozen() -> None:
    """Leave what the server's start made (settings, apps, models, the modules they import: about
    140,000 objects) out of the cyclic garbage collector's full collections.

    Those objects live as long as the process, yet every full collection walks all of them: one
    took about 100 ms of CPU, and the objects that requests leave behind for a while (records
    on their way to a push, a pipeline's batch) set one off every few thousand messages, about 2
    ms of every batch of 100 (docs/decisions/0255). The garbage among them is collected first,
    so that only what is alive is kept out; reference counting still frees everything."""
    gc.collect()
    gc.freeze()


class PipelineStarter:
    """Starts the post-commit pipeline's worker with the first connection a server takes.

    A served process runs the pipeline from then on: its sweep catches up on whatever commits no
    run has seen (a crash, another process). It also tells the live push which loop is the
    server's (``ledger/push.py``). Importing this module starts nothing.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.started = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if not self.started:
            self.started = True
            # Live pushes from threads without a loop (the pipeline's) go to the server's loop.
            ledger.pusher.serve_on(asyncio.get_running_loop())
            if settings.PIPELINE_MODE == "thread":
                ledger.pipeline.start()
            retention_daily.start()  # when OPERATIONS_RETENTION asks for it
        await self.app(scope, receive, send)


async def lifespan(receive: Any, send: Any) -> None:
    """The ASGI lifespan (uvicorn runs with ``--lifespan on``): at startup, what the start made
    is left out of the garbage collector's walks (``startup_heap_frozen``; the pipeline starts
    with the first connection), and the signals that stop the server end the waiting claims
    first (``claims_end_at_stop_signals``); at shutdown, the queued trace spans are exported
    while the process still runs (docs/decisions/0190)."""
    restore_signals = None
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            startup_heap_frozen()
            restore_signals = claims_end_at_stop_signals(asyncio.get_running_loop())
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            if restore_signals is not None:
                restore_signals()
            await asyncio.to_thread(tracing_flush)
            await send({"type": "lifespan.shutdown.complete"})
            return


application = PipelineStarter(
    ProtocolTypeRouter(
        {
            # Claims that wait are answered on the event loop, never on a thread of Django's;
            # publishes with one thread hop, not Django's three (docs/decisions/0155), and so
            # are a lease's completion, heartbeat and failure (docs/decisions/0170).
            "http": RequestBodyLimit(ClaimRoute(PublishRoute(LeaseRoute(django_asgi_app)))),
            # Outermost, so that the pushed frames skip every send wrapper below it
            # (docs/decisions/0210); nothing above wraps send.
            "websocket": ledger.ServerSend(
                WebsocketCounter(
                    BrowserOriginValidator(
                        AuthMiddlewareStack(URLRouter(websocket_urlpatterns)),
                        settings.ALLOWED_HOSTS,
                    )
                )
            ),
        }
    )
)
