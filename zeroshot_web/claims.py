"""``POST /api/v1/tasks/claim`` with a bearer key, answered in front of Django, on the event loop.

Django runs its sync middleware chain on a thread per request, and an async view inside it
keeps that thread for as long as the view awaits: 600 waiting long-poll claims held 492
threads. This route takes the claims that carry an API key before Django sees them and does
what the Ninja endpoint does — the same key check, scoping, rate limit, body bounds, schema and
error shape, the same answer — with its short database work on executor threads and its wait
on the event loop (``runs.waiting``). Everything else, including a claim made with an
operator's session or with a query string, goes on to Django. The Ninja endpoint stays: it
answers those and describes the route in the OpenAPI schema.
docs/decisions/0085-claims-wait-on-the-event-loop.md.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import signal
import threading
import time
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any, TypeVar

import pydantic
from django.conf import settings

from ledger.errors import ServiceError
from ledger.keys import ApiKeyIdentity, api_key_authenticate, api_key_known
from ledger.threads import in_database
from ledger.validation import text_problem
from runs.api import ClaimIn, ClaimOut, claim_filter
from runs.waiting import claim_waiting, claims_stop_waiting
from zeroshot_web.api import BoundedJsonParser
from zeroshot_web.limits import ASGIApp, Receive, Scope, Send
from zeroshot_web.middleware import CONTENT_SECURITY_POLICY
from zeroshot_web.throttling import rate_count, rate_count_on_loop, retry_after

logger = logging.getLogger(__name__)

Model = TypeVar("Model", bound=pydantic.BaseModel)

PATH = "/api/v1/tasks/claim"
# What Django's middleware adds to every API answer.
HEADERS = [
    (b"content-type", b"application/json; charset=utf-8"),
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
]
UNAUTHORIZED = {
    "code": "unauthorized",
    "message": "a valid API key is required (Authorization: Bearer …)",
}
SERVER_ERROR = {
    "code": "server_error",
    "message": "the server failed to answer; the error is logged",
}


class Answer(Exception):
    """Ends the request with ``status`` and ``body`` (None: no body)."""

    def __init__(
        self,
        status: int,
        body: dict[str, Any] | list[Any] | None,
        headers: tuple[tuple[bytes, bytes], ...] = (),
    ) -> None:
        super().__init__(status)
        self.status, self.body, self.headers = status, body, headers


class BearerRoute:
    """Wraps the HTTP app; a ``POST`` to ``path`` (no query string) with a bearer key is
    answered by ``answer`` in front of Django: the body read, the key checked and counted
    against its rate limit, errors in the API's shape, the answer with Django's headers. A key
    that is not known, with a session cookie beside it, goes on to Django with its body, as
    Ninja tries the session next; any other request goes on untouched. ``seconds``, when set,
    times each answered request."""

    path: re.Pattern[str]
    seconds: Any = None  # a prometheus_client Histogram

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def answer(
        self, match: re.Match[str], body: bytes, identity: ApiKeyIdentity, arrived: float
    ) -> Answer:
        raise NotImplementedError

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = self._match(scope)
        token = _bearer(scope) if match is not None else None
        if match is None or token is None:
            await self.app(scope, receive, send)
            return
        arrived = time.monotonic()
        try:
            body = await _body(receive)
            identity = await _identity(token)
            if identity is None:
                if _has_header(scope, b"cookie"):
                    # A session may still authenticate it, as Ninja tries it next.
                    await self.app(scope, _replay(body, receive), send)
                    return
                raise Answer(401, UNAUTHORIZED)
            answer = await self.answer(match, body, identity, arrived)
        except Answer as done:
            answer = done
        except Exception:
            logger.exception("unhandled error on POST %s", scope.get("path"))
            answer = Answer(500, SERVER_ERROR)
        await _send(send, answer)
        if self.seconds is not None:
            self.seconds.observe(time.monotonic() - arrived)

    def _match(self, scope: Scope) -> re.Match[str] | None:
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("query_string"):
            return None
        path = scope.get("path", "")
        match = self.path.fullmatch(path)
        if match is None or text_problem(path) is not None:
            return None  # Django answers: a 404, or the refusal of unstorable input
        return match


class ClaimRoute(BearerRoute):
    """Bearer-key claims are answered here."""

    path = re.compile(re.escape(PATH))

    async def answer(
        self, match: re.Match[str], body: bytes, identity: ApiKeyIdentity, arrived: float
    ) -> Answer:
        return await _claim(identity, body, arrived)


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            text: str = bytes(value).decode("latin-1")
            scheme, _, token = text.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


def _has_header(scope: Scope, wanted: bytes) -> bool:
    return any(name.lower() == wanted for name, _ in scope.get("headers", []))


async def _body(receive: Receive) -> bytes:
    """The whole body (``RequestBodyLimit`` in front has bounded it)."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise Answer(400, {"code": "bad_request", "message": "the request could not be read"})
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _identity(token: str) -> ApiKeyIdentity | None:
    """The key's identity, or None; over its rate limit, 429. A key verified lately needs no
    thread: a burst of requests is admitted on the loop itself, its rate limit counted there."""
    known = api_key_known(plain=token)
    if known is None:
        return await in_database(_admit)(token)  # type: ignore[no-any-return]
    if settings.API_RATE_LIMIT:
        allowed, wait = await rate_count_on_loop(known)
        if not allowed:
            raise _refused(wait)
    return known


def _admit(token: str) -> ApiKeyIdentity | None:
    """The key's identity, or None; over its rate limit, 429 as Ninja's throttle answers."""
    identity = api_key_authenticate(plain=token)
    if identity is None:
        return None
    allowed, wait = rate_count(identity)
    if not allowed:
        raise _refused(wait)
    return identity


def _refused(wait: float | None) -> Answer:
    seconds = retry_after(wait or 0)
    return Answer(
        429,
        {"code": "rate_limited", "message": "Too many requests."},
        ((b"retry-after", str(int(seconds)).encode()),),
    )


async def _claim(identity: ApiKeyIdentity, body: bytes, arrived: float) -> Answer:
    payload = _payload(body)
    try:
        wanted = claim_filter(payload, identity.cluster_id)
        claim = await claim_waiting(
            wanted=wanted,
            wait=payload.wait,
            lease_seconds=round(payload.lease) if payload.lease is not None else None,
            worker=payload.worker,
            run=_run,
            since=arrived,
        )
    except ServiceError as error:
        raise Answer(error.status, error.to_dict()) from None
    if claim is None:
        return Answer(204, None)
    return Answer(200, shaped(ClaimOut, claim.to_wire()))


async def _run(fn: Any) -> Any:
    return await in_database(fn)()


def shaped(
    schema: type[pydantic.BaseModel], value: Mapping[str, Any], *, exclude_unset: bool = False
) -> dict[str, Any]:
    """``schema.model_validate(value).model_dump(mode="json", exclude_unset=...)`` for a value
    the server made itself (a record's ``to_wire()``, whose types are the schema's): the
    schema's fields in its order, nested schemas shaped alike, every other value as it is. The
    validation of a value the server made, and its copy, cost more than the rest of the answer
    (tests/zeroshot_web/test_claim_route.py compares the two, byte for byte)."""
    out: dict[str, Any] = {}
    for name, nested, required, default in _shape(schema):
        if name not in value:
            if required:
                raise KeyError(f"{schema.__name__}.{name} is missing from the value")
            if not exclude_unset:
                out[name] = default
            continue
        item = value[name]
        if nested is not None and isinstance(item, Mapping):
            item = shaped(nested, item, exclude_unset=exclude_unset)
        out[name] = item
    return out


@functools.cache
def _shape(
    schema: type[pydantic.BaseModel],
) -> tuple[tuple[str, type[pydantic.BaseModel] | None, bool, Any], ...]:
    """Each field of ``schema``: its name, its schema when it is one, whether it is required,
    its default."""
    fields = []
    for name, field in schema.model_fields.items():
        kind = field.annotation
        nested = kind if isinstance(kind, type) and issubclass(kind, pydantic.BaseModel) else None
        required = field.is_required()
        default = None if required else field.get_default(call_default_factory=True)
        if not isinstance(default, str | int | float | bool | None):
            raise TypeError(f"{schema.__name__}.{name}: a default shaped() cannot pass on")
        fields.append((name, nested, required, default))
    return tuple(fields)


def _payload(body: bytes) -> ClaimIn:
    """The body as ``ClaimIn``, refused as the API's parser and schema refuse it."""
    return _validated(ClaimIn, _parsed(body))


def _parsed(body: bytes) -> Any:
    """The JSON body as the API's parser reads it, refused as it refuses it."""
    if not body:
        raise _invalid([{"loc": [], "message": "Field required", "type": "missing"}])
    try:
        return BoundedJsonParser().parse_body(_BodyOnly(body))  # type: ignore[arg-type]
    except ServiceError as error:
        raise Answer(error.status, error.to_dict()) from None


def _validated(schema: type[Model], value: Any) -> Model:
    """``value`` as ``schema``, refused with the API's 422 shape."""
    try:
        return schema.model_validate(value)
    except pydantic.ValidationError as error:
        raise _invalid(
            [
                {"loc": list(e["loc"]), "message": e["msg"], "type": e["type"]}
                for e in error.errors()
            ]
        ) from None


class _BodyOnly:
    """What ``BoundedJsonParser.parse_body`` reads of a request."""

    def __init__(self, body: bytes) -> None:
        self.body = body


def _invalid(details: list[dict[str, Any]]) -> Answer:
    first = details[0]
    where = ".".join(str(part) for part in first["loc"]) or "request"
    return Answer(
        422,
        {
            "code": "validation_error",
            "message": f"{where}: {first['message']}",
            "details": details,
        },
    )


async def _send(send: Send, answer: Answer) -> None:
    body = b"" if answer.body is None else json.dumps(answer.body).encode()
    headers = [*HEADERS, *answer.headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def claims_end_at_stop_signals(loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
    """When the server is asked to stop (SIGTERM, SIGINT), its waiting claims answer at once with
    no task (``runs.waiting.claims_stop_waiting``) before the server's own handler runs: a claim
    waiting longer than the server's grace period (``--timeout-graceful-shutdown``, 5 s) would
    otherwise be cancelled, cut off mid-request with a traceback in the log, instead of
    answered. Only the main thread can take signals, and only a handler the server installed
    is chained (the default ones do not stop gracefully). Returns what puts the handlers back.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    chained: dict[signal.Signals, Callable[[int, FrameType | None], Any]] = {}
    for signum in (signal.SIGTERM, signal.SIGINT):
        installed = signal.getsignal(signum)
        if not callable(installed):
            continue
        chained[signum] = installed
        signal.signal(signum, functools.partial(_stop_then, loop, installed))

    def restore() -> None:
        for signum, previous in chained.items():
            signal.signal(signum, previous)

    return restore


def _stop_then(
    loop: asyncio.AbstractEventLoop,
    installed: Callable[[int, FrameType | None], Any],
    number: int,
    frame: FrameType | None,
) -> None:
    """A stop signal's handler: the waiting claims end, then the server's handler runs."""
    claims_stop_waiting(loop)
    installed(number, frame)
