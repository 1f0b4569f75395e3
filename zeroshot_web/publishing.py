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

import re
from typing import Any

import pydantic

from ledger import services
from ledger.errors import Forbidden, ServiceError
from ledger.keys import ApiKeyIdentity
from ledger.schemas import BatchIn, MessageIn, batch_length_check
from ledger.threads import in_database
from operations.metrics import PUBLISH_SECONDS
from zeroshot_web.claims import Answer, BearerRoute, _parsed, _validated


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


class PublishRoute(BearerRoute):
    """Bearer-key publishes are answered here."""

    path = PATH
    seconds = PUBLISH_SECONDS

    async def answer(
        self, match: re.Match[str], body: bytes, identity: ApiKeyIdentity, arrived: float
    ) -> Answer:
        return await _publish(body, match.group(1), match.group(2) is not None, identity)


async def _publish(body: bytes, cluster_id: str, batch: bool, identity: ApiKeyIdentity) -> Answer:
    value = _parsed(body)
    if batch:
        try:
            batch_length_check(value)
        except ServiceError as error:  # a batch over the limit
            raise Answer(error.status, error.to_dict()) from None
    payload: Any = _validated(_Batch if batch else _Message, value)
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
