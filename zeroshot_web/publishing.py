"""``POST /api/v1/clusters/<id>/messages[/batch]`` with a bearer key, answered in front of Django.

A publish through Django crossed its whole middleware chain (on a thread of its own), went back
to the event loop for the async view, then to a database thread: three thread hops and the
chain's work for an answer that needs none of it (bench/results/cpu.md names the costs). This
route does what the Ninja endpoints do, with the same code — the key check and rate limit of
the claim route (``zeroshot_web.claims``), ``BoundedJsonParser``, ``MessageIn``/``BatchIn``,
the scope check, ``message_publish``/``message_publish_batch`` on the long-lived database
threads, the records' wire shape for the 201 (which ``MessageOut`` passes through unchanged: one
serialization per message), the error shape and the headers Django's middleware adds,
and the publish timer of ``/metrics`` — with one thread hop. Anything else (a session, a
query string, a path Django would refuse) goes on to Django, whose endpoints stay and describe
the route in the OpenAPI schema. docs/decisions/0155-publish-route.md.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import pydantic

from ledger import services
from ledger.errors import Forbidden, ServiceError
from ledger.keys import ApiKeyIdentity
from ledger.schemas import BatchIn, MessageIn, batch_length_check
from ledger.threads import in_database
from ledger.validation import text_problem
from operations.metrics import PUBLISH_SECONDS
from zeroshot_web.api import BoundedJsonParser
from zeroshot_web.claims import (
    SERVER_ERROR,
    UNAUTHORIZED,
    Answer,
    _bearer,
    _body,
    _BodyOnly,
    _has_header,
    _identity,
    _invalid,
    _replay,
    _send,
)
from zeroshot_web.limits import ASGIApp, Receive, Scope, Send

logger = logging.getLogger(__name__)


def _plain(schema: type[pydantic.BaseModel], **fields: Any) -> type[pydantic.BaseModel]:
    """``schema`` as a plain pydantic model: the same fields, the same checks and errors, and
    the same name (pydantic names it in some errors), without the wrapper Ninja puts around
    every object of a ``Schema`` (for reading ORM objects), which cost about 40 µs a message
    (docs/decisions/0177)."""
    of_schema = {name: (f.annotation, f) for name, f in schema.model_fields.items()}
    return pydantic.create_model(
        schema.__name__,
        __config__=pydantic.ConfigDict(extra="forbid", from_attributes=True),
        **(of_schema | fields),
    )


_Message = _plain(MessageIn)
_Batch = _plain(BatchIn, messages=(list[_Message], ...))  # type: ignore[valid-type]

# Ninja's path parameter: one segment, any character but a slash.
PATH = re.compile(r"/api/v1/clusters/([^/]+)/messages(/batch)?")


class PublishRoute:
    """Wraps the HTTP app; bearer-key publishes are answered here."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = _match(scope)
        token = _bearer(scope) if match is not None else None
        if match is None or token is None:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        cluster_id, batch = match.group(1), match.group(2) is not None
        try:
            body = await _body(receive)
            identity = await _identity(token)
            if identity is None:
                if _has_header(scope, b"cookie"):
                    # A session may still authenticate it, as Ninja tries it next.
                    await self.app(scope, _replay(body, receive), send)
                    return
                raise Answer(401, UNAUTHORIZED)
            answer = await _publish(body, cluster_id, batch, identity)
        except Answer as done:
            answer = done
        except Exception:
            logger.exception("unhandled error on POST %s", scope.get("path"))
            answer = Answer(500, SERVER_ERROR)
        await _send(send, answer)
        PUBLISH_SECONDS.observe(time.perf_counter() - started)


def _match(scope: Scope) -> re.Match[str] | None:
    if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("query_string"):
        return None
    path = scope.get("path", "")
    match = PATH.fullmatch(path)
    if match is None or text_problem(path) is not None:
        return None  # Django answers: a 404, or the refusal of unstorable input
    return match


async def _publish(body: bytes, cluster_id: str, batch: bool, identity: ApiKeyIdentity) -> Answer:
    value = _parsed(body)
    try:
        if batch:
            batch_length_check(value)
        payload: Any = (_Batch if batch else _Message).model_validate(value)
    except ServiceError as error:  # a batch over the limit
        raise Answer(error.status, error.to_dict()) from None
    except pydantic.ValidationError as error:
        raise _invalid(
            [
                {"loc": list(e["loc"]), "message": e["msg"], "type": e["type"]}
                for e in error.errors()
            ]
        ) from None
    try:
        if not identity.may_access(cluster_id):  # require_cluster, after the body as there
            raise Forbidden(
                f"this API key is limited to cluster {identity.cluster_id!r}",
                details={"cluster_id": cluster_id},
            )
        if batch:
            records = await in_database(services.message_publish_batch)(
                cluster_id=cluster_id, drafts=[MessageIn.draft(m) for m in payload.messages]
            )
            return Answer(201, [record.to_wire() for record in records])
        record = await in_database(services.message_publish)(
            cluster_id=cluster_id, draft=MessageIn.draft(payload)
        )
        return Answer(201, record.to_wire())
    except ServiceError as error:
        raise Answer(error.status, error.to_dict()) from None


def _parsed(body: bytes) -> Any:
    if not body:
        raise _invalid([{"loc": [], "message": "Field required", "type": "missing"}])
    try:
        return BoundedJsonParser().parse_body(_BodyOnly(body))  # type: ignore[arg-type]
    except ServiceError as error:
        raise Answer(error.status, error.to_dict()) from None
