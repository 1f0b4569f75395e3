"""Liveness and readiness (issue 21): what a load balancer or an orchestrator asks a server.

Liveness says the process answers; readiness says it can do its work: the database answers, the
channel layer carries a message, and the post-commit pipeline keeps up. Each check reports how
long it took, and only the kind of a failure: a probe is public, an error text may hold a DSN.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection

from operations.lag import pipeline_lagging

CHANNEL_TIMEOUT_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class Check:
    """One readiness check's outcome."""

    name: str
    ok: bool
    ms: float
    detail: dict[str, object]

    def as_json(self) -> dict[str, object]:
        return {"ok": self.ok, "ms": round(self.ms, 1), **self.detail}


@dataclass(frozen=True, slots=True)
class Readiness:
    """Every check; ready when all pass."""

    checks: tuple[Check, ...]

    @property
    def ready(self) -> bool:
        return all(check.ok for check in self.checks)

    def as_json(self) -> dict[str, object]:
        return {
            "status": "ready" if self.ready else "unready",
            "checks": {check.name: check.as_json() for check in self.checks},
        }


def _failure(error: BaseException) -> dict[str, object]:
    return {"error": type(error).__name__}


def database_check() -> Check:
    """One round trip to the database."""
    started = time.perf_counter()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as error:  # any failure means "not ready", and is reported as such
        return Check("database", False, _ms(started), _failure(error))
    return Check("database", True, _ms(started), {})


def pipeline_check() -> Check:
    """The pipeline keeps up: no live cluster has more unoffered messages than the setting."""
    started = time.perf_counter()
    limit = settings.OPERATIONS_READY_MAX_PIPELINE_LAG
    try:
        lagging = pipeline_lagging(limit=1000, live_only=True)
    except Exception as error:
        return Check("pipeline", False, _ms(started), _failure(error))
    worst = max((lag.messages for lag in lagging), default=0)
    detail: dict[str, object] = {
        "lagging_clusters": len(lagging),
        "max_lag": worst,
        "max_lag_allowed": limit,
    }
    return Check("pipeline", worst <= limit, _ms(started), detail)


async def channel_layer_check() -> Check:
    """A message sent on the channel layer comes back (to this process's own channel)."""
    started = time.perf_counter()
    layer = get_channel_layer()
    if layer is None:
        return Check("channel_layer", False, _ms(started), {"error": "NoChannelLayer"})
    token = uuid.uuid4().hex
    try:
        channel = await layer.new_channel(prefix="readyz.")
        await layer.send(channel, {"type": "readyz.ping", "token": token})
        received = await asyncio.wait_for(layer.receive(channel), CHANNEL_TIMEOUT_SECONDS)
    except Exception as error:
        return Check("channel_layer", False, _ms(started), _failure(error))
    ok = isinstance(received, dict) and received.get("token") == token
    return Check("channel_layer", ok, _ms(started), {} if ok else {"error": "WrongMessage"})


async def readiness() -> Readiness:
    """Every readiness check, the database ones on a worker thread."""
    database = await sync_to_async(database_check, thread_sensitive=True)()
    layer = await channel_layer_check()
    pipeline = await sync_to_async(pipeline_check, thread_sensitive=True)()
    return Readiness(checks=(database, layer, pipeline))


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000
